"""teach."""
