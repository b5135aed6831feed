"""ablate."""
