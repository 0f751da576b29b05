"""The experience library of SLEA-RL: observation clusters, step-level retrieval, evolution and persistence.

Engines use :class:`ExperienceSystem` only; see docs/experience_library.md.
"""

from recipe.forge.experience.index import ObservationIndex
from recipe.forge.experience.library import GOLDEN, LEVELS, WARNING, Candidate, ExperienceEntry, ExperienceLibrary
from recipe.forge.experience.similarity import NearDuplicateIndex, sequence_similarity
from recipe.forge.experience.store import CheckpointError
from recipe.forge.experience.system import ExperienceSystem, LibrarySnapshot

__all__ = [
    "GOLDEN", "WARNING", "LEVELS", "Candidate", "CheckpointError", "ExperienceEntry", "ExperienceLibrary",
    "ExperienceSystem", "LibrarySnapshot", "NearDuplicateIndex", "ObservationIndex", "sequence_similarity",
]
