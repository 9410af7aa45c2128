"""Recipes, format simulation and recommendation: what to run, from predictions."""
