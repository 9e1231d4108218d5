"""``llm-operator demo``: the whole loop on this machine, shown step by step with rich.

See :mod:`.loop` for the parts and which are emulated. The steps: apply the example
(``demo/tiny-llama-local.yaml``), the plan, the tuning Job's trials as they finish,
the rollout onto the tuned settings, load from vLLM's benchmark, the adaptation's
decisions and the cap in force, then ``kubectl get llms`` and the Events.
"""

from __future__ import annotations

import json
import re
import signal
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from llm_operator.adaptation.prometheus import VLLM_PREEMPTIONS
from llm_operator.inpod.engine.cap import METRIC_CAP

from .cap_effect import (
    ADAPTED,
    CONFIG,
    LOCAL_FIGURES,
    NODES_CONFIG,
    NODES_FIGURES,
    STATIC,
    Round,
    Workload,
    load_config,
    record,
    round_from,
    summarize,
)
from .loop import (
    LocalLoop,
    condition,
    default_vllm_python,
    max_num_seqs_arg,
    missing_parts,
    ready_server,
    serves_cap,
    tuner_log_lines,
)
from .vllm_load import Load, LoadRun, engine_metric

INTRO_CLUSTER = (
    "[bold]Real[/]: the Kubernetes control plane (kube-apiserver, etcd, "
    "kube-controller-manager, kube-scheduler v1.37.2, built from Go modules), the chart "
    "installed by helm, the operator process (llm-operator run) under the chart's "
    "ServiceAccount token, kubectl, vLLM (CPU build, serving a tiny generated model), the "
    "tuner in the tuning Job, vLLM's benchmark as the load, and Prometheus, which finds the "
    "pods only through the rendered PodMonitor.\n"
    "[bold]Local[/]: the kubelet, which runs each pod the scheduler binds to its nodes as "
    "local processes (it prints what it substitutes); there is no GPU."
)
INTRO_NODES = (
    "[bold]Real[/]: the Kubernetes control plane (kube-apiserver, etcd, "
    "kube-controller-manager, kube-scheduler v1.37.2), one node: Kubernetes' kubelet "
    "v1.37.2 and kube-proxy (built from Go modules), containerd and runc (Debian's), a CNI "
    "bridge, CoreDNS, and a registry that requires a login. The pods run in containers, "
    "exactly as rendered, from images built on this machine: the operator's (the "
    "chart's pod) and a vLLM CPU image. helm, kubectl, the tuner in the tuning Job, vLLM's "
    "benchmark as the load, and Prometheus, which finds the pods only through the "
    "rendered PodMonitor.\n"
    "[bold]Stand-ins[/]: 8 GPUs a device plugin advertises (the scheduler and the kubelet "
    "count them; nothing is behind them: vLLM runs on the CPUs), and a generated model "
    "served by a local Hub endpoint."
)
INTRO = (
    "[bold]Emulated[/]: the Kubernetes API server (kmock, in this process: not a cluster) "
    "and the [bold]node agent[/] that plays the Deployment/Job controllers and the kubelet, "
    "running each rendered container as a local process (it prints what it substitutes).\n"
    "[bold]Real[/]: kubectl, the operator process (llm-operator run), vLLM (CPU build, "
    "serving a tiny generated model), the tuner in the tuning Job, vLLM's benchmark as the "
    "load, and Prometheus, which finds the pods only through the rendered PodMonitor."
)
# The loads and the comparison: benchmarks/configs/demo_binding_cap.yaml, and
# demo_binding_cap_nodes.yaml on real nodes (each registered before any run).
EFFECTS = {"local": load_config(CONFIG), "nodes": load_config(NODES_CONFIG)}
# Where the demo writes its two PNGs (outside the run's folder, which it removes).
PLOTS_DIR = Path(tempfile.gettempdir()) / "llmop-demo-plots"


class LoopDemo:
    """One run of the loop demo (see the module docstring)."""

    def __init__(self, console: Console, loop: LocalLoop) -> None:
        self.console = console
        self.loop = loop
        self.name = loop.example()["metadata"]["name"]
        self.cfg = EFFECTS["nodes" if loop.backend == "nodes" else "local"]

    def show(self, *args: str) -> None:
        """Run kubectl and show the command and its output."""
        self.console.print(f"[bold cyan]$ kubectl {' '.join(args)}[/]")
        self.console.print(self.loop.kubectl(*args, check=False), markup=False,
                           highlight=False, soft_wrap=True)

    def svc(self) -> dict[str, Any]:
        return self.loop.get("llms", self.name)

    def wait(self, what: str, probe: Callable[[], Any], timeout: float,
             tick: Callable[[], None] | None = None) -> Any:
        """Poll ``probe`` until it returns something true (None after ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self.console.status(what):
            while time.monotonic() < deadline:
                if tick is not None:
                    tick()
                result = probe()
                if result:
                    return result
                time.sleep(1.0)
        self.console.print(f"[yellow]Gave up after {timeout:.0f} s: {what}[/]")
        return None

    def plan(self) -> None:
        self.console.rule("1. Plan")
        svc = self.wait("The operator plans the service",
                        lambda: (s := self.svc()) and condition(s, "Planned").get("status")
                        == "True" and s, 60)
        if not svc:
            raise RuntimeError("no plan")
        plan = svc["status"].get("plan") or {}
        self.console.print(
            f"GPUs per replica {plan.get('gpusPerReplica')}, TP {plan.get('tensorParallelSize')}, "
            f"max-model-len {plan.get('maxModelLen')}, KV capacity {plan.get('kvTokenCapacity')} "
            f"tokens, planned max-num-seqs {plan.get('maxNumSeqs')} (on the GPU the spec names; "
            + ("here vLLM's CPU build holds 4,096 tokens of this model in the 1 GiB "
               "VLLM_CPU_KVCACHE_SPACE the manifest gives it)" if self.loop.backend == "nodes"
               else "here the node agent gives vLLM a 4,096-token CPU KV cache instead)"))

    def tuning(self) -> dict[str, Any]:
        self.console.rule("2. Tuning Job (spec.tuning.placement: BeforeServing)")
        seen: set[str] = set()

        def tick() -> None:
            for line in tuner_log_lines(self.loop, seen):
                self.console.print(f"  [dim]tuner[/] {line}", highlight=False)

        def tuned() -> dict[str, Any] | None:
            svc = self.svc()
            cond = condition(svc, "Tuned")
            state = ((svc.get("status") or {}).get("tuning") or {}).get("state")
            return svc if cond.get("status") == "True" or state in ("Failed",) else None

        svc = self.wait("The tuning Job runs the tuner against a real vLLM (CPU)", tuned, 900,
                        tick) or self.svc()
        tick()
        tuning = (svc.get("status") or {}).get("tuning") or {}
        table = Table(title=f"Tuning: {tuning.get('state')} ({tuning.get('source', '')}), "
                      f"{tuning.get('wallSeconds', 0):.0f} s")
        # Eight columns fit a terminal of 80; the interval is on the Decision line below.
        keys = ("trial", "phase", "maxNumSeqs", "maxNumBatchedTokens", "goodput", "ratio",
                "pairs", "error")
        for col in keys:
            table.add_column(col)
        for row in tuning.get("table") or []:
            table.add_row(*(_cell(row.get(k)) for k in keys))
        if tuning.get("table"):
            self.console.print(table)
        self.console.print(f"best {tuning.get('best')}; applied {tuning.get('applied')}")
        if tuning.get("sweep"):  # how the trials were measured, and what it cost in starts
            self.console.print(f"{tuning.get('trials')} trial(s), {tuning.get('serverStarts')} "
                               f"vLLM start(s): {tuning['sweep']}", highlight=False)
        # The decision with its paired interval against vLLM's defaults (issue 32).
        self.console.print(f"Decision: {tuning.get('decision') or 'none recorded'}",
                           highlight=False)
        # The condition's message begins with "Tuned" itself: its status and reason lead.
        cond = condition(svc, "Tuned")
        self.console.print(f"Condition Tuned={cond.get('status')} ({cond.get('reason')}): "
                           f"{cond.get('message', '')}", highlight=False)
        return svc

    def rollout(self) -> dict[str, Any] | None:
        self.console.rule("3. Rollout onto the tuned settings")

        def on_tuned() -> dict[str, Any] | None:
            want = ((self.svc().get("status") or {}).get("engine") or {}).get("maxNumSeqs")
            pod = ready_server(self.loop, self.name)
            return pod if pod is not None and serves_cap(self.loop, self.name, pod, want) else None

        pod = self.wait("The Deployment's pod starts vLLM and passes its probes", on_tuned, 600)
        self.show("get", "deployments,pods", "-n", self.loop.settings.namespace, "-o", "wide")
        if pod:
            self.console.print(f"Pod {pod['metadata']['name']} serves with --max-num-seqs "
                               f"{max_num_seqs_arg(pod)} at {self.loop.pod_url(pod)}")
        return pod

    def load_and_adapt(self, pod: dict[str, Any]) -> int | None:
        """vLLM's benchmark with one shift in it: a light round, then heavy rounds back to
        back until the adaptation has moved the cap and the engine reports the moved cap
        in force (or the time limit). Returns the cap the engine reported before the load
        (the tuned start)."""
        self.console.rule("4. Load (vllm.benchmarks.serve) and online adaptation (mode Apply)")
        url = self.loop.pod_url(pod)
        assert url is not None and self.loop.model_dir is not None
        light, heavy = self.cfg.light, self.cfg.heavy
        start = self.cap_in_force(url)
        self.console.print(
            f"The engine's cap before the load: {start}. One light round ({light.clients} "
            f"clients, {light.prompts} requests), then rounds of {heavy.clients} clients, "
            f"{heavy.prompts} requests of {heavy.input}+{heavy.output} tokens, until the "
            f"engine reports a moved cap in force (at most {self.cfg.adapt_seconds:.0f} s)")
        seen = _Adaptation(pod["metadata"]["name"])
        deadline = time.monotonic() + self.cfg.adapt_seconds
        with self.console.status("Load runs; the operator reads Prometheus every "
                                 "spec.adaptation.intervalSeconds"):
            rounds = 0
            while time.monotonic() < deadline:
                work = light if rounds == 0 else heavy
                rounds += 1
                run = LoadRun(self.loop.vllm_python, url, self.loop.model_name, _load(work),
                              tokenizer=str(self.loop.model_dir))
                try:
                    while run.running() and time.monotonic() < deadline:
                        for line in seen.news(self.svc()):
                            self.console.print(line, highlight=False)
                        time.sleep(1)
                    if run.running():
                        self.console.print("Load stopped at the demo's time limit")
                        break
                    result = run.wait(10)
                    self.console.print(
                        f"Benchmark round ({work.clients} clients): {result.get('completed')} "
                        f"requests, {result.get('output_throughput', 0):.0f} output tok/s, "
                        f"TTFT p95 {result.get('p95_ttft_ms', 0):.0f} ms, ITL p95 "
                        f"{result.get('p95_itl_ms', 0):.0f} ms")
                finally:
                    run.kill()
                if work is heavy and seen.moved_to is not None and seen.in_force == seen.moved_to:
                    break
        if seen.moved_to is None:
            self.console.print("[yellow]The adaptation held the cap during this load[/]")
        elif seen.in_force != seen.moved_to:
            self.console.print(f"[yellow]The engine had not reported cap {seen.moved_to} in "
                               "force when the load ended[/]")
        return start

    def cap_in_force(self, url: str) -> int | None:
        """The admission cap the engine reports (:data:`METRIC_CAP`), or None."""
        try:
            cap = engine_metric(url, METRIC_CAP)
        except OSError:
            return None
        return int(cap) if cap > 0 else None

    def reports_cap(self, url: str, cap: int) -> bool:
        return self.cap_in_force(url) == cap

    def effect(self, pod: dict[str, Any], static: int | None) -> list[Round]:
        """The registered comparison (``benchmarks/configs/demo_binding_cap.yaml``): the
        same load with the cap the adaptation chose and with the tuned one, held in turn
        by the adaptation's own bounds (``spec.adaptation.minMaxNumSeqs`` =
        ``maxMaxNumSeqs`` = the arm's cap: a cap outside its bounds moves into them at the
        next tick, live; ``spec.engine.maxNumSeqs`` would restart the pod), interleaved;
        the table of means and ranges. The bounds are removed at the end."""
        self.console.rule(f"5. The effect of the adapted cap ({self.cfg.label})")
        url = self.loop.pod_url(pod)
        assert url is not None and self.loop.model_dir is not None
        adapted = self.cap_in_force(url)
        if adapted is None or static is None or adapted >= static:
            self.console.print(f"[yellow]No comparison[/]: the adaptation left the cap at "
                               f"{adapted} (started at {static}); nothing binds to compare")
            return []
        caps = {ADAPTED: adapted, STATIC: static}
        w = self.cfg.load
        self.console.print(
            f"The same load ({w.clients} clients, {w.prompts} requests of {w.input}+{w.output} "
            f"tokens) {len(self.cfg.order)} times, interleaved {', '.join(self.cfg.order)}: cap "
            f"{adapted} (adapted) against {static} (tuned, static), each held live by "
            "spec.adaptation.minMaxNumSeqs = maxMaxNumSeqs (no restart). Goodput counts "
            f"requests meeting TTFT {self.cfg.ttft_ms} ms and TPOT {self.cfg.tpot_ms} ms.")
        ns = self.loop.settings.namespace
        rounds: list[Round] = []
        try:
            for i, arm in enumerate(self.cfg.order, 1):
                cap = caps[arm]
                self.loop.kubectl("patch", "llms", self.name, "-n", ns, "--type=merge", "-p",
                                  json.dumps(_bounds(cap)))
                if not self.wait(f"The engine reports cap {cap}",
                                 partial(self.reports_cap, url, cap), self.cfg.cap_timeout_s):
                    self.console.print("[yellow]Comparison stopped: the cap did not arrive[/]")
                    break
                before = engine_metric(url, VLLM_PREEMPTIONS)
                load = _load(w, goodput=(f"ttft:{self.cfg.ttft_ms}", f"tpot:{self.cfg.tpot_ms}"))
                with self.console.status(f"Round {i}/{len(self.cfg.order)}: {arm}, cap {cap}"):
                    run = LoadRun(self.loop.vllm_python, url, self.loop.model_name, load,
                                  tokenizer=str(self.loop.model_dir))
                    try:
                        result = run.wait(600)
                    finally:
                        run.kill()
                r = round_from(arm, cap, result,
                               engine_metric(url, VLLM_PREEMPTIONS) - before)
                rounds.append(r)
                self.console.print(
                    f"  round {i} {arm:>7} cap {cap:>3}: {r.completed} requests, "
                    f"{r.preemptions:.0f} preemptions, TTFT p95 {r.ttft_p95_ms:,.0f} ms, "
                    f"goodput {r.goodput_rps:.2f} req/s, {r.output_tps:,.0f} output tok/s",
                    highlight=False)
        finally:
            self.loop.kubectl("patch", "llms", self.name, "-n", ns, "--type=merge", "-p",
                              json.dumps(_bounds(None)), check=False)
        rows = summarize(rounds)
        if rows:
            table = Table(title=escape(
                f"Cap {adapted} (adapted) vs {static} (tuned, static): mean [lowest, "
                f"highest] of {len(rounds) // 2} rounds each, measured on the CPU engine"
                + (" in real containers" if self.loop.backend == "nodes" else "")))
            for col in ("metric", "adapted", "static", "verdict"):
                table.add_column(col)
            for row in rows:
                table.add_row(row.metric, row.cell(row.adapted), row.cell(row.static),
                              row.verdict)
            self.console.print(table)
            PLOTS_DIR.mkdir(parents=True, exist_ok=True)
            path = PLOTS_DIR / f"{self.cfg.label}.json"
            path.write_text(json.dumps(record(
                rounds, self.cfg, adapted, static,
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                NODES_FIGURES if self.loop.backend == "nodes" else LOCAL_FIGURES),
                indent=1) + "\n")
            self.console.print(f"wrote [bold]{escape(str(path))}[/]", soft_wrap=True)
        self.console.print("The bounds are removed: the adaptation goes on from here.")
        return rounds

    def plots(self, since: float | None) -> list[Path]:
        """The tuning trials and the adaptation timeline as PNGs in :data:`PLOTS_DIR`
        (``llm-operator plot``'s code). Best effort: without matplotlib, or when a plot
        cannot be made, it says so and the demo goes on."""
        self.console.rule("7. Plots")
        from llm_operator.cli.plot import read_timeline, write_timeline_png, write_tuning_png
        from llm_operator.cli.plots import (
            PlotsUnavailable,
            require_matplotlib,
            trials_from_document,
        )

        try:
            require_matplotlib()
        except PlotsUnavailable as exc:
            self.console.print(f"[yellow]No plots[/]: {escape(str(exc))}")
            return []
        ns, written = self.loop.settings.namespace, []
        try:
            trials = trials_from_document(self.svc(), f"{ns}/{self.name}, the demo's tuning Job")
            written.append(write_tuning_png(trials, PLOTS_DIR / "tuning-trials.png"))
        except Exception as exc:  # noqa: BLE001 - a plot never fails the demo
            self.console.print(f"[yellow]No tuning plot[/]: {escape(str(exc))}")
        prom = self.loop.discovery.prometheus if self.loop.discovery else None
        if prom is not None and since is not None:
            end = time.time()
            scrape = self.loop.settings.scrape_interval_seconds
            step = max(scrape, (end - since) / 240)
            try:
                timeline = read_timeline(prom.url, ns, self.name, since, end, step,
                                         max(step, 2 * scrape))
                written.append(write_timeline_png(timeline,
                                                  PLOTS_DIR / "adaptation-timeline.png"))
            except Exception as exc:  # noqa: BLE001 - a plot never fails the demo
                self.console.print(f"[yellow]No timeline plot[/]: {escape(str(exc))}")
        for path in written:
            self.console.print(f"wrote [bold]{escape(str(path))}[/]", soft_wrap=True)
        return written

    def report(self) -> None:
        self.console.rule("6. What the user sees")
        ns = self.loop.settings.namespace
        self.show("get", "llms", "-n", ns, "-o", "wide")
        self.show("get", "events", "-n", ns, "--field-selector",
                  "involvedObject.kind=LLMService")
        if self.loop.backend == "nodes":
            self.containers()

    def containers(self) -> None:
        """Each pod's containers: the image containerd resolved (by digest) and the
        container's ID, whose scheme names the runtime (``containerd://``), as
        Kubernetes' kubelet on the real node reports them in the pods' status."""
        table = Table(title="The pods' containers, as the kubelet reports them")
        for col in ("pod", "container", "image (registry digest)", "runtime://ID"):
            table.add_column(col, overflow="fold")
        runtimes, registries = set(), set()
        for ns in (self.loop.settings.namespace, "llm-operator"):
            for pod in self.loop.get_in(ns, "pods").get("items") or []:
                status = pod.get("status") or {}
                for s in (status.get("initContainerStatuses") or []) + (
                        status.get("containerStatuses") or []):
                    runtime, _, cid = (s.get("containerID") or "").partition("://")
                    runtimes.add(runtime)
                    image = s.get("imageID") or s.get("image", "")
                    registry, _, repo = image.partition("/")
                    registries.add(registry)
                    table.add_row(pod["metadata"]["name"], s["name"], repo[:32],
                                  f"{runtime}://{cid[:12]}")
        self.console.print(table)
        if runtimes == {"containerd"} and registries == {self.loop.nodes.registry.host}:
            self.console.print(
                f"Every container above ran under containerd (runc), started by Kubernetes' "
                f"kubelet on node {self.loop.nodes.node.name}, from images built on this "
                f"machine and pulled from the registry {self.loop.nodes.registry.host}.")
        else:
            self.console.print(f"[yellow]Runtimes seen: {sorted(runtimes)}; registries: "
                               f"{sorted(registries)}[/]")


class _Adaptation:
    """What the demo has shown of ``status.adaptation``: the range the cap moves in and
    the tuned value it started from, the last decision, the cap the engine reports in
    force, the cap the last move asked for."""

    def __init__(self, pod_name: str) -> None:
        self.pod_name = pod_name
        self.last_decision: str | None = None
        self.in_force: Any = None
        self.moved_to: Any = None
        self.cap_range: Any = None

    def news(self, svc: dict[str, Any]) -> list[str]:
        """The lines to print for what changed in ``svc``'s status since the last call."""
        adaptation = (svc.get("status") or {}).get("adaptation") or {}
        decision = adaptation.get("lastDecision") or {}
        lines = []
        bounds = adaptation.get("bounds") or {}
        cap_range = (bounds.get("lower"), bounds.get("upper"), adaptation.get("tuned"))
        if bounds and cap_range != self.cap_range:
            self.cap_range = cap_range
            tuned = adaptation.get("tuned")
            lines.append(f"  the cap moves between {bounds.get('lower')} and {bounds.get('upper')} "
                         f"(upper: {bounds.get('upperSource')}); "
                         + ("no tuned value" if tuned is None else
                            f"tuned value {tuned}: where it starts, not a bound"))
        if decision and decision.get("time") != self.last_decision:
            self.last_decision = decision.get("time")
            if decision.get("action") in ("lower", "raise"):
                self.moved_to = decision.get("to")
            lines.append(f"  decision [bold]{decision.get('action')}[/] {decision.get('from')} "
                         f"-> {decision.get('to')}: {decision.get('reason')}")
        if adaptation.get("capInForce") != self.in_force:
            self.in_force = adaptation.get("capInForce")
            lines.append(f"  the engine reports cap [bold]{self.in_force}[/] in force "
                         f"({adaptation.get('actuation', '')}; pod {self.pod_name}, no restart)")
        return lines


def _bounds(cap: int | None) -> dict[str, Any]:
    """A merge patch that holds the adaptation's cap at ``cap`` (None: the defaults)."""
    return {"spec": {"adaptation": {"minMaxNumSeqs": cap, "maxMaxNumSeqs": cap}}}


def _load(w: Workload, goodput: tuple[str, ...] = ()) -> Load:
    return Load(concurrency=w.clients, num_prompts=w.prompts, input_len=w.input,
                output_len=w.output, goodput=goodput)


def _shown(line: str) -> bool:
    """The node agent's lines the demo shows: the substitutions it prints at start and
    what happens to pods and Jobs; each container's own substitutions and command lines
    go to the agent's log only (the start lists every kind)."""
    return not re.search(r"\bpod \S+(, container \S+)?: (starting |[^:]* -> )", line)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def helm_binary(project: Path) -> str | None:
    """helm from ``tools/install_helm.py`` (``.cache/bin``), else on PATH."""
    import shutil

    local = project / ".cache" / "bin" / "helm"
    return str(local) if local.exists() else shutil.which("helm")


def run_loop_demo(project: Path, kubectl: str | None, console: Console | None = None, *,
                  keep: bool = False, emulated: bool = False, nodes: bool = False) -> int:
    """Run the loop demo with the checkout ``project`` and ``kubectl``; the exit code.
    On the real control plane unless ``emulated``; its pods in real containers on a real
    node when ``nodes``, else as processes of the local kubelet."""
    import os

    from .cluster import binaries_present, cache_dir
    from .nodes import built_images, device_plugin_binary, registry_binary

    console = console or Console()
    vllm_python = default_vllm_python(project)
    missing = missing_parts(project, vllm_python, kubectl)
    helm = helm_binary(project)
    if not emulated and not binaries_present():
        missing.append(f"the control plane's binaries in {cache_dir()} (bash tools/setup.sh "
                       "--cluster builds them once)")
    if not emulated and helm is None:
        missing.append("helm (python tools/install_helm.py)")
    if nodes:
        if os.geteuid() != 0:
            missing.append("root (containerd, the kubelet and iptables need it)")
        if not (cache_dir() / "kubelet").exists():
            missing.append(f"the kubelet in {cache_dir()} (bash tools/setup.sh --cluster)")
        images = built_images()
        if not (registry_binary().exists() and device_plugin_binary().exists()
                and "operator" in images and "vllm" in images):
            missing.append("the registry and the images built here (bash tools/setup.sh "
                           "--nodes)")
    if missing:
        console.print("[red]error[/] the loop needs: " + "; ".join(missing) +
                      ". `bash tools/demo.sh` installs them; `llm-operator demo --tour` "
                      "runs without an engine.")
        return 2
    assert kubectl is not None

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds the loop: every process it started stops

    signal.signal(signal.SIGTERM, terminate)
    console.print(Panel(INTRO if emulated else INTRO_NODES if nodes else INTRO_CLUSTER,
                        title="llm-operator demo: the whole loop on one machine",
                        border_style="yellow"))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmop-loop-") as tmp:
        agent_log = Path(tmp) / "node-agent.log"

        def say(text: str) -> None:
            with agent_log.open("a") as f:
                f.write(text + "\n")
            if _shown(text):
                console.print(f"[dim]{escape(text)}[/]", highlight=False)

        backend = "emulated" if emulated else "nodes" if nodes else "cluster"
        loop = LocalLoop(project, Path(tmp), kubectl, vllm_python=vllm_python, say=say,
                         backend=backend, helm=helm)
        with loop:
            demo = LoopDemo(console, loop)
            console.print(f"[bold cyan]$ kubectl apply -f demo/{loop.example_file}[/]")
            for line in loop.filled_in():
                console.print(f"  (the demo fills in {line})", highlight=False, soft_wrap=True)
            console.print(loop.apply(loop.example()), markup=False)
            demo.plan()
            demo.tuning()
            pod = demo.rollout()
            load_began = None
            if pod is not None:
                load_began = time.time() - 60  # the minute before the load: the cap at rest
                static = demo.load_and_adapt(pod)
                demo.effect(pod, static)
            demo.report()
            demo.plots(load_began)
            if keep:
                console.print(Panel(f"export KUBECONFIG={loop.kubeconfig}\nkubectl get llms "
                                    "-o wide   # ... Ctrl-C to stop",
                                    title="Still running (" + (
                                        "emulated API server, local agent" if emulated else
                                        "real control plane, real node" if nodes else
                                        "real control plane, local kubelet") + ")",
                                    border_style="yellow"))
                try:
                    while True:
                        time.sleep(1)
                except KeyboardInterrupt:
                    pass
            console.rule("Stopping")
            loop.kubectl("delete", "llms", demo.name, "-n", loop.settings.namespace,
                         "--wait=false", check=False)
    if nodes:
        console.print(f"\nDone in {time.monotonic() - started:.0f} s. The control plane, the "
                      "node (Kubernetes' kubelet, containerd, runc), helm, kubectl, vLLM, the "
                      "tuner and Prometheus were real; the pods ran in containers from images "
                      "built on this machine, on CPUs (the 8 GPUs were a device plugin's "
                      "stand-ins).")
    elif emulated:
        console.print(f"\nDone in {time.monotonic() - started:.0f} s. The API server and the "
                      "node agent were emulated (not a cluster); vLLM, the tuner, Prometheus "
                      "and kubectl were real.")
    else:
        console.print(f"\nDone in {time.monotonic() - started:.0f} s. The control plane, helm, "
                      "kubectl, vLLM, the tuner and Prometheus were real; the kubelet ran the "
                      "pods as local processes, on CPUs.")
    return 0
