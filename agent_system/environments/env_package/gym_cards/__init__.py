"""Gym Cards (after RL4VLM's gym-cards): NumberLine, EZPoints, Points24 and Blackjack as text games with
optional rendered card images. Rules and rewards follow the RL4VLM definitions; the code is our own."""
