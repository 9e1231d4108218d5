"""The error taxonomy of the logic layer.

Pure code raises these; the handlers translate them: a :class:`SpecError` becomes a
``kopf.PermanentError`` and an ``Invalid`` condition (the user must edit the spec).
"""

from __future__ import annotations


class SpecError(ValueError):
    """The LLMService spec cannot be served as written.

    ``field`` is the JSON path in the spec (``spec.engine.tensorParallelSize``) and
    ``fix`` says what the user can change. ``str()`` gives one line naming both.
    """

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}: {problem}. Fix: {fix}")


class SpecErrors(ValueError):
    """Several :class:`SpecError` at once, so the user sees them all in one pass."""

    def __init__(self, errors: list[SpecError], source: str | None = None) -> None:
        self.errors = errors
        self.source = source  # the file they came from, when the command line read one
        super().__init__("; ".join(str(e) for e in errors))


class InputError(ValueError):
    """A file given to the command line cannot be read as LLMService manifests:
    missing, not YAML, or holding no LLMService. ``source`` names the file."""

    def __init__(self, source: str, problem: str, fix: str) -> None:
        self.source = source
        self.problem = problem
        self.fix = fix
        super().__init__(f"{source}: {problem}. Fix: {fix}")
