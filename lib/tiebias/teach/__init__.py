"""Teaching material: toy mechanisms per notebook, the exercises, the coding exercises' checkers and the walkthrough."""

from tiebias.teach import answers, coding, exercises, mechanisms, walkthrough
from tiebias.teach.coding import CheckResult, check, run_check

__all__ = ["CheckResult", "answers", "check", "coding", "exercises", "mechanisms", "run_check", "walkthrough"]
