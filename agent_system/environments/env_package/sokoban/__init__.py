"""Sokoban: our own seeded room generator (a solved room played backwards), gym-sokoban's rewards."""
