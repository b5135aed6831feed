"""Teaching material: toy mechanisms per notebook, the exercises, the coding exercises' checkers and the walkthrough."""

from tiebias.teach import coding, exercises, mechanisms, walkthrough
from tiebias.teach.coding import CheckResult, check, run_check

__all__ = ["CheckResult", "check", "coding", "exercises", "mechanisms", "run_check", "walkthrough"]
