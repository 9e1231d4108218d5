"""Every benchmark owns sections between ``<!-- name:begin -->`` and ``<!-- name:end -->``
and replaces only those. A current section lives on its benchmark's page,
``benchmarks/results/SLUG.md``; one a later run superseded lives in
``benchmarks/HISTORY.md``; ``benchmarks/RESULTS.md`` opens with the questions a user asks
and sums up every benchmark's goals, generated from the sections by ``benchmarks.goals
--write`` (which also moves a new section, appended to RESULTS.md, to its page). A section
is replaced where it lives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HISTORY = RESULTS.with_name("HISTORY.md")
PAGES = RESULTS.with_name("results")  # one page per benchmark: its current runs in full


def pages() -> list[Path]:
    """The benchmarks' pages."""
    return sorted(PAGES.glob("*.md"))


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of section ``name``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def home(name: str) -> Path:
    """Where section ``name`` lives: HISTORY.md once it was superseded, its benchmark's
    page once it was placed there, else RESULTS.md (a new section, until placed)."""
    begin, end = markers(name)
    for path in (HISTORY, *pages()):
        text = path.read_text() if path.exists() else ""
        if begin in text and end in text:
            return path
    return RESULTS


def current() -> str:
    """RESULTS.md and the benchmarks' pages together: every current section."""
    return "\n".join(p.read_text() for p in (RESULTS, *pages()) if p.exists())


def published() -> str:
    """Every current and superseded section together: all a stored run renders to."""
    return "\n".join(p.read_text() for p in (RESULTS, *pages(), HISTORY) if p.exists())


def replace_section(name: str, section: str, path: Path | None = None) -> None:
    """Replace section ``name`` (``section`` includes its markers) in ``path`` (by default
    the file it lives in, :func:`home`), re-read just before writing since other sections
    belong to other benchmarks; append it when the file does not have it yet."""
    path = home(name) if path is None else path
    begin, end = markers(name)
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section.rstrip("\n") + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    path.write_text(text)


def emit(name: str, section: str, write: bool) -> int:
    """Print section ``name``, and with ``write`` replace it where it lives (its
    benchmark's page, or HISTORY.md once superseded; a benchmark's ``--write``); returns
    the exit status."""
    import sys

    if write:
        replace_section(name, section)
    sys.stdout.write(section)
    return 0


def record_or_write(doc: str, name: str, record: Callable[[], object],
                    render: Callable[[], str], argv: list[str] | None = None) -> int:
    """The command line of a benchmark whose figures are stored: ``--record`` re-measures
    and stores them (``record``), ``--write`` replaces section ``name`` of RESULTS.md
    with ``render()``; without either it prints the section."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="measure and store the figures")
    parser.add_argument("--write", action="store_true",
                        help="replace the section where it lives (its page or HISTORY.md)")
    args = parser.parse_args(argv)
    if args.record:
        record()
        if not args.write:
            return 0
    return emit(name, render(), args.write)
