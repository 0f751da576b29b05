"""verl plugin entry point (group ``verl.plugins``): ``import verl`` imports this module in every process.

It registers SLEA-RL's advantage estimators in verl's registry. verl swallows errors raised here, so the
tests check in a fresh subprocess that registration really happened.
"""

from recipe.forge.core_forge import register_with_verl

register_with_verl()
