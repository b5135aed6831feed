"""Teaching material: toy mechanisms per notebook, the exercises and the rendered walkthrough."""

from tiebias.teach import exercises, mechanisms, walkthrough

__all__ = ["exercises", "mechanisms", "walkthrough"]
