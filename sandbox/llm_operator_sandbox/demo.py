"""``llm-operator demo``: the operator at work on one machine, without a cluster.

By default it runs the whole loop (:func:`run_loop_demo`, :mod:`.loop`): a tiny generated
model planned, tuned by a real tuning Job, rolled out, served by the real vLLM CPU engine
under load from vLLM's benchmark, watched by a real Prometheus through the rendered
PodMonitor and adapted live, on a REAL local control plane (kube-apiserver, etcd,
controller-manager and scheduler v1.37.2) with a local kubelet; ``--emulated`` runs it on
the emulated API server and node agent instead. ``--tour`` gives the quick tour without
an engine (:func:`run_demo`):

The tour starts an EMULATED Kubernetes API server in this process (see
:mod:`llm_operator_sandbox.emulator`: in memory, no scheduler, no kubelet, no GPUs), then
drives everything else for real: ``kubectl apply`` of the CRD and the examples, the
operator as its own process (``llm-operator run``), and ``kubectl get`` to show what it
did. Where a Deployment controller would report pods available, the demo says so and
writes that status itself. It stops by itself (``--keep`` leaves it running for your own
kubectl commands).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.panel import Panel

from .processes import stop as stop_process

CRD_FILE = "llmservices.llmops.dev.yaml"
NAMESPACE = "default"
LOOP_EXAMPLE = "tiny-llama-local.yaml"


def find_project_dir(start: Path | None = None) -> Path | None:
    """The folder holding ``crds/``, ``examples/`` and ``demo/``: the current directory (a
    checkout) or the checkout the package was installed from in editable mode."""
    candidates = [start or Path.cwd(), Path(__file__).resolve().parents[2]]
    for base in candidates:
        if ((base / "crds" / CRD_FILE).exists() and (base / "examples").is_dir()
                and (base / "demo" / LOOP_EXAMPLE).exists()):
            return base
    return None


def kubectl_binary() -> str | None:
    """kubectl next to this Python (the ``demo`` extra installs one), else on PATH."""
    local = Path(sys.executable).parent / "kubectl"
    return str(local) if local.exists() else shutil.which("kubectl")


class Demo:
    """One run of the demo (see the module docstring)."""

    def __init__(self, console: Console, project: Path, kubectl: str, workdir: Path) -> None:
        self.console = console
        self.project = project
        self.kubectl_path = kubectl
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig.yaml"
        self.env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                    "KUBECACHEDIR": str(workdir / "kube-cache")}

    def kubectl(self, *args: str, show: bool = True, check: bool = True) -> str:
        """Run kubectl, echo the command and its output."""
        if show:
            self.console.print(f"[bold cyan]$ kubectl {' '.join(args)}[/]")
        proc = subprocess.run([self.kubectl_path, *args], env=self.env, text=True,
                              capture_output=True, timeout=60)
        out = (proc.stdout + proc.stderr).rstrip()
        if show and out:
            self.console.print(out, markup=False, highlight=False, soft_wrap=True)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def get_json(self, *args: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", *args, "-o", "json", show=False)))

    def wait(self, what: str, probe: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.console.status(what):
            while time.monotonic() < deadline:
                if probe():
                    return True
                time.sleep(0.3)
        self.console.print(f"[yellow]Gave up waiting after {timeout:.0f}s: {what}[/]")
        return False

    def services_settled(self) -> bool:
        """Every LLMService is either planned or marked invalid."""
        items = self.get_json("llms", "-n", NAMESPACE).get("items", [])
        def settled(svc: dict[str, Any]) -> bool:
            conds = {c["type"]: c["status"] for c in svc.get("status", {}).get("conditions", [])}
            return conds.get("Planned") == "True" or conds.get("SpecValid") == "False"
        return bool(items) and all(settled(s) for s in items)

    def play_deployment_controller(self) -> list[str]:
        """Write each Deployment's status as its controller would once pods are ready."""
        names = []
        for dep in self.get_json("deployments", "-n", NAMESPACE).get("items", []):
            replicas = dep["spec"].get("replicas", 1)
            status = {"replicas": replicas, "updatedReplicas": replicas,
                      "readyReplicas": replicas, "availableReplicas": replicas,
                      "observedGeneration": dep["metadata"]["generation"]}
            self.kubectl("patch", "deployment", dep["metadata"]["name"], "-n", NAMESPACE,
                         "--subresource", "status", "--type", "merge",
                         "-p", json.dumps({"status": status}), show=False)
            names.append(dep["metadata"]["name"])
        return names

    def show_one(self) -> None:
        """The container args and the plan's reasons of the first deployed service."""
        deps = self.get_json("deployments", "-n", NAMESPACE).get("items", [])
        if not deps:
            return
        name = deps[0]["metadata"]["name"]
        container = deps[0]["spec"]["template"]["spec"]["containers"][0]
        self.console.rule(f"What the operator rendered for {name}")
        self.console.print(f"[bold cyan]$ kubectl get deployment {name} -o yaml[/]  "
                           "(the vLLM container, abridged)")
        shown = {k: container[k] for k in ("image", "args", "resources") if k in container}
        self.console.print(yaml.safe_dump(shown, sort_keys=False).rstrip(), markup=False,
                           highlight=False)
        svc = self.get_json("llms", name, "-n", NAMESPACE)
        self.console.print(f"[bold cyan]$ kubectl get llms {name} -o yaml[/]  "
                           "(status.plan.explanations: why each number)")
        for e in svc.get("status", {}).get("plan", {}).get("explanations", []):
            self.console.print(f"  [bold]{e['name']}[/] = {e['value']} ({e['source']}): "
                               f"{e['formula']}", highlight=False)


def run_demo(console: Console | None = None, *, keep: bool = False,
             settle_seconds: float = 45, project_dir: str | None = None) -> int:
    """Run the demo; returns the exit code."""
    console = console or Console()
    project = Path(project_dir) if project_dir else find_project_dir()
    if project is None:
        console.print("[red]error[/] crds/, examples/ and demo/ not found: run the demo from the "
                      "llm-operator checkout (or pass --project-dir)")
        return 2
    try:
        from .emulator import EmulatorThread
    except ImportError as exc:
        console.print(f"[red]error[/] {exc}: pip install 'llm-operator[demo]' (kmock)")
        return 2
    kubectl = kubectl_binary()
    if kubectl is None:
        console.print("[red]error[/] no kubectl: pip install 'llm-operator[demo]' "
                      "(it brings a static kubectl) or put kubectl on PATH")
        return 2
    started = time.monotonic()
    console.print(Panel(
        "The Kubernetes API server in this demo is [bold]EMULATED[/] (kmock, in memory, in "
        "this process). It is [bold]not a cluster[/]: there is no scheduler, kubelet, "
        "controller (but a simple garbage collector) or GPU, and no vLLM pod will start.\n"
        "Real: kubectl, the CRD, the example manifests, and the operator process "
        "(llm-operator run) planning, rendering and applying through the API.",
        title="llm-operator demo", border_style="yellow"))
    # The loop's manifest (demo/) serves a generated model only the local node agent has:
    # the tour (no engine) plans the cluster examples only.
    examples = sorted((project / "examples").glob("*.yaml"))
    with tempfile.TemporaryDirectory(prefix="llmop-demo-") as tmp, EmulatorThread() as api:
        workdir = Path(tmp)
        api.write_kubeconfig(workdir / "kubeconfig.yaml", NAMESPACE)
        demo = Demo(console, project, kubectl, workdir)
        console.print(f"Emulated API server on {api.url}; KUBECONFIG={demo.kubeconfig}\n")
        demo.kubectl("apply", "--validate=false", "-f", str(project / "crds" / CRD_FILE))
        log_path = workdir / "operator.log"
        with log_path.open("wb") as log:
            operator = subprocess.Popen(
                [sys.executable, "-m", "llm_operator.cli", "run", "--standalone",
                 "-n", NAMESPACE],
                env={**demo.env, "LLMOP_HEALTH_PORT": "0", "PYTHONUNBUFFERED": "1"},
                stdout=log, stderr=subprocess.STDOUT)
        try:
            demo.wait("Starting the operator (llm-operator run)",
                      lambda: "Initial authentication has finished" in log_path.read_text()
                      or operator.poll() is not None, 30)
            if operator.poll() is not None:
                console.print(log_path.read_text(), markup=False)
                return 1
            console.print("The operator runs as its own process (PID "
                          f"{operator.pid}).\n")
            args = ["apply", "--validate=false", "-n", NAMESPACE]
            for path in examples:
                args += ["-f", str(path)]
            demo.kubectl(*args)
            demo.wait("The operator plans and renders each LLMService",
                      demo.services_settled, settle_seconds)
            console.print()
            demo.kubectl("get", "llms", "-n", NAMESPACE, "-o", "wide")
            demo.kubectl("get", "deployments,services", "-n", NAMESPACE)
            demo.show_one()
            console.rule("Playing the Deployment controller")
            console.print("There is no Deployment controller here, so the demo now writes "
                          "each Deployment's status as one would once its pods were ready "
                          "(kubectl patch --subresource status). The operator turns that "
                          "into the Ready condition:")
            names = demo.play_deployment_controller()
            demo.wait("Waiting for Ready", lambda: all(
                any(c["type"] == "Ready" and c["status"] == "True"
                    for c in demo.get_json("llms", n, "-n", NAMESPACE).get(
                        "status", {}).get("conditions", []))
                for n in names), 60)  # 20 s gave up on a loaded 2-core machine
            demo.kubectl("get", "llms", "-n", NAMESPACE)
            demo.kubectl("get", "events", "-n", NAMESPACE, "--field-selector",
                         "involvedObject.kind=LLMService")
            if keep:
                console.print(Panel(
                    f"export KUBECONFIG={demo.kubeconfig}\n"
                    f"kubectl get llms -o wide   # ... Ctrl-C to stop",
                    title="Still running (emulated API server)", border_style="yellow"))
                try:
                    while operator.poll() is None:
                        time.sleep(1)
                except KeyboardInterrupt:
                    pass
        finally:
            stop_process(operator, 15)
    console.print(f"\nDone in {time.monotonic() - started:.0f} s. Everything above ran "
                  "against an emulated API server, not a cluster.")
    return 0


def add_parser(sub: Any) -> None:
    """Register ``llm-operator demo`` on the CLI's subparsers."""
    p = sub.add_parser("demo", help="the whole loop on this machine: a tiny model planned, "
                       "tuned, served by vLLM (CPU), loaded and adapted, on a REAL local "
                       "control plane with a local kubelet (a few minutes); --emulated: the "
                       "same on the emulated API server; --tour: the quick tour without an "
                       "engine (about a minute)")
    p.add_argument("--tour", action="store_true",
                   help="the quick tour: plan and render the examples, no engine, no pods")
    p.add_argument("--emulated", action="store_true",
                   help="the EMULATED API server and node agent instead of the real control "
                        "plane (no Go build needed)")
    p.add_argument("--nodes", action="store_true",
                   help="the pods in REAL containers: Kubernetes' kubelet, containerd and "
                        "runc on this machine, images built here (needs root and `bash "
                        "tools/setup.sh --nodes`; `bash tools/demo.sh` does both)")
    p.add_argument("--keep", action="store_true",
                   help="keep the emulated server and the operator running until Ctrl-C")
    p.add_argument("--project-dir", help="folder with crds/, examples/ and demo/ (default: found)")
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args: Any) -> int:
    if args.tour:
        return run_demo(keep=args.keep, project_dir=args.project_dir)
    project = Path(args.project_dir) if args.project_dir else find_project_dir()
    if project is None:
        Console().print("[red]error[/] crds/, examples/ and demo/ not found: run the demo from the "
                        "llm-operator checkout (or pass --project-dir)")
        return 2
    from .loop_demo import run_loop_demo

    return run_loop_demo(project, kubectl_binary(), keep=args.keep, emulated=args.emulated,
                         nodes=args.nodes)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llm_operator_sandbox.demo``."""
    import argparse

    parser = argparse.ArgumentParser(prog="llm-operator demo")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    args = parser.parse_args(["demo", *(argv or sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
