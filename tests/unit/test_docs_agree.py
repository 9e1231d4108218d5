"""The pages a user installs from agree with each other (issue 59 item 2).

Every ``helm install``, ``helm upgrade`` and ``helm uninstall`` in the README,
CONTRIBUTING.md, the chart's README and NOTES.txt, docs/ and tools/push_image.sh names one
release, the chart in this repository and one namespace, and every ``kubectl`` command there
that names a namespace names that one (or a placeholder: ``NAMESPACE``, ``<namespace>``, a
template); none tells the user to ``kubectl apply -f examples/`` as a whole (five GPU types,
Secrets and claims at once: each example's header lists what it needs); no page title cites
an issue. Two pages that disagree on the install fail here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASE = NAMESPACE = "llm-operator"


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "tools" / "push_image.sh",
             ROOT / "charts" / "llm-operator" / "README.md",
             ROOT / "charts" / "llm-operator" / "templates" / "NOTES.txt"]
    docs = ROOT / "docs"
    return pages + sorted([*docs.rglob("*.md"), *docs.rglob("*.yaml")])


def _commands(text: str) -> list[str]:
    """Shell lines with their backslash continuations joined (a script's ``\\\\`` too)."""
    return re.sub(r"\\{1,2}\n\s*", " ", text).splitlines()


# A helm command at the start of a line (a code block, a script, a YAML comment), not
# a mention in prose ("`helm install` prints a warning").
HELM = re.compile(r"^\s*(?:[#$]\s*)?helm (install|upgrade|uninstall) (\S+)(.*)")
KUBECTL = re.compile(r"^\s*(?:[#$]\s*)?kubectl\b(.*)")
NS_FLAG = re.compile(r"(?:\s-n|--namespace)[ =](\S+)")


def _namespace(args: str) -> str | None:
    m = NS_FLAG.search(" " + args)
    return m.group(1) if m else None


def _helm_problem(verb: str, release: str, args: str) -> str | None:
    """What is wrong with one helm command of the chart, or None."""
    if release != RELEASE:
        return f"release {release!r}, not {RELEASE!r}"
    if verb != "uninstall" and args.split()[:1] != ["charts/llm-operator"]:
        return "not the chart charts/llm-operator"
    if _namespace(args) != NAMESPACE:
        return f"namespace {_namespace(args)!r}, not {NAMESPACE!r}"
    if verb == "install" and "--create-namespace" not in args:
        return "no --create-namespace"
    return None


def _kubectl_problem(args: str) -> str | None:
    ns = _namespace(args)
    if ns is None or ns == NAMESPACE or ns.isupper() or ns.startswith(("<", "{{", "$")):
        return None
    return f"namespace {ns!r}, not {NAMESPACE!r}"


def test_every_helm_command_of_the_chart_uses_one_release_chart_and_namespace() -> None:
    verbs = []
    for page in _pages():
        for line in _commands(page.read_text()):
            m = HELM.match(line)
            if m:
                problem = _helm_problem(*m.groups())
                assert problem is None, f"{page.relative_to(ROOT)}: {problem}: {line.strip()}"
                verbs.append(m.group(1))
    # The README, the chart's README, push_image.sh, the kube-prometheus-stack values.
    assert verbs.count("install") >= 4, verbs


def test_every_kubectl_command_names_the_install_namespace_or_a_placeholder() -> None:
    """A page whose command says ``kubectl ... -n llm-system`` disagrees with the README's
    install; placeholders (NAMESPACE, OPERATOR_NAMESPACE, <namespace>, a Helm template) are
    fine, and so is an operator message quoted in prose for a service elsewhere."""
    seen = 0
    for page in _pages():
        for line in _commands(page.read_text()):
            m = KUBECTL.match(line)
            if m and _namespace(m.group(1)) is not None:
                seen += 1
                problem = _kubectl_problem(m.group(1))
                assert problem is None, f"{page.relative_to(ROOT)}: {problem}: {line.strip()}"
    assert seen >= 5


def test_the_checks_catch_a_page_that_disagrees() -> None:
    for bad in ["helm install llm-operator charts/llm-operator -n llm-system --create-namespace",
                "helm install llmop charts/llm-operator -n llm-operator --create-namespace",
                "helm install llm-operator charts/llm-operator -n llm-operator",
                "helm upgrade llm-operator oci://example/llm-operator -n llm-operator",
                "  # helm uninstall llm-operator --namespace=llm-system"]:
        m = HELM.match(bad)
        assert m and _helm_problem(*m.groups()), bad
    good = "helm install llm-operator charts/llm-operator -n llm-operator --create-namespace"
    m = HELM.match(good)
    assert m and _helm_problem(*m.groups()) is None
    assert HELM.match("You `helm install` it on a cluster") is None
    assert _kubectl_problem(" get llms -n llm-system")
    assert _kubectl_problem(" get llms -n NAMESPACE") is None


def test_no_page_applies_every_example_at_once() -> None:
    for page in _pages():
        for line in _commands(page.read_text()):
            assert not re.search(r"kubectl apply\b.*-f\s+examples/?(\s|$|`)", line), (
                f"{page.relative_to(ROOT)} applies the whole examples/ folder: {line.strip()}")


def test_no_page_title_cites_an_issue() -> None:
    for page in _pages():
        if page.suffix != ".md":
            continue
        for line in page.read_text().splitlines():
            if line.startswith("#"):
                assert not re.search(r"\bissues? \d", line, re.IGNORECASE), (
                    f"{page.relative_to(ROOT)}: {line}")
