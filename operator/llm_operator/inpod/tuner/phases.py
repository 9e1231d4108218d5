"""The search's phases (pure): the baseline and its sweep, max-num-seqs (verify, the
planner's hint, the walk toward the SLO, refine), max-num-batched-tokens and chunked
prefill.

:class:`Phases` adds them to :class:`~.trials.Trials` (which runs the trials and decides
between them); :func:`.search.search` calls them in that order. The rules they follow are
in :mod:`.search`'s docstring. Standard library only.
"""

from __future__ import annotations

from dataclasses import replace

from .compare import pairs_for
from .records import Trial, slower
from .space import Config
from .sweep import interpolate, predict_cap_goodput, snap, sweep_concurrencies
from .trials import Trials


class Phases(Trials):
    """One search in progress, with its phases (see :class:`~.trials.Trials`)."""

    def baseline(self) -> Trial:
        mns_levels = self.space.max_num_seqs

        def plan(trial: Trial) -> list[int]:
            if not mns_levels or not trial.runs:
                return []
            m = trial.runs[0]
            kv_cap = (int(m.kv_tokens * self.space.kv_token_factor
                          // (self.wl.input_tokens + self.wl.output_tokens))
                      if m.kv_tokens else None)
            limit = self.space.default_max_num_seqs
            return sweep_concurrencies(self.wl.concurrency, mns_levels, self.opts,
                                       kv_cap, limit)

        # Without the live cap every configuration has its own server, so a comparison
        # pairs the i-th runs of two servers: the baseline needs the runs a decision at
        # the stated confidence needs.
        runs = self.opts.repeats
        if self.opts.can_restart and self.needs_start is None:
            runs = max(runs, min(pairs_for(self.opts.confidence), self.opts.max_pairs))
        self.base = self.run_trial(Config(), "baseline", plan, runs=runs)
        return self.base

    def predict(self, base: Trial) -> dict[int, float]:
        """Predicted goodput by cap, from the baseline's repeats and probes: inside the
        prediction margin; where that predicts no probed cap above the defaults but the
        SLO itself does, at the SLO (a cap on the SLO's edge is worth one verification
        when the alternative is keeping the defaults, which the sweep says do no better;
        the paired comparison still decides)."""
        C = self.wl.concurrency

        def at(margin: float) -> dict[int, float]:
            return {p.concurrency: predict_cap_goodput(p, C, self.slo, margin)
                    for p in base.probes}

        preds = at(self.opts.predict_margin)
        floor = max(base.score, 0.0)
        if preds and max(preds.values()) <= floor and self.opts.predict_margin < 1.0:
            edge = at(1.0)
            if max(edge.values()) > floor:
                self.notes.append(
                    f"no probed cap is predicted to beat vLLM's defaults within "
                    f"{self.opts.predict_margin:.0%} of the SLO; the caps predicted to beat "
                    "them at the SLO itself are verified")
                preds = edge
        # Caps that never bind behave like the baseline: those at or above C, and those
        # at or above the running batch the baseline actually reached (the KV cache, not
        # the cap, limited it).
        limit = self.never_binds_from(base)
        for lvl in self.space.max_num_seqs:
            if lvl >= limit:
                preds[lvl] = base.score
        return preds

    def never_binds_from(self, base: Trial) -> int:
        """The smallest cap that the baseline's load never reached (so it cannot bind)."""
        limit = self.wl.concurrency
        default = self.space.default_max_num_seqs
        if default is not None:
            limit = min(limit, default)
        # running_max is never below the window's mean from the engine's counters, so a
        # sampler that missed the busy part cannot make a cap look unreached.
        reached = max((m.running_max for m in base.runs), default=0.0)
        if 0 < reached < limit:
            limit = int(reached) + 1
        return limit

    def search_mns(self, base: Trial) -> None:
        levels = self.space.max_num_seqs
        preds = self.predict(base)
        self.predictions = dict(sorted(preds.items()))
        if not preds:
            return
        best_pred = max(preds.values())

        def predicted(lvl: int) -> float | None:
            return interpolate(preds, lvl)

        # Start from the best prediction; on ties prefer the larger cap (more headroom).
        ranked = sorted(preds, key=lambda k: (preds[k], k), reverse=True)
        limit = self.never_binds_from(base)
        if ranked[0] >= limit:
            self.notes.append("the sweep predicts no cap below the workload concurrency helps")
            # Caps >= C equal the default under this load: still verify the nearest one
            # below only if the prediction there is within the refine margin.
        else:
            # Verify the caps predicted to beat the defaults, best first, until one wins
            # (at most verify_points): one probe is one noisy run, so the best prediction
            # may be a lucky one, and the next best is the sweep's evidence, where the
            # hill-climb below would only look next to the defaults' cap (tune-landscape-2).
            verify = [Config(max_num_seqs=k) for k in ranked[:1] + [
                k for k in ranked[1:] if k < limit and preds[k] > base.score]]
            verify = verify[: max(1, self.opts.verify_points)]
            if not self.can_afford(verify[0]):
                return
            self.first_better(verify, "verify", base)
        if not self.chain and not self.verify_hint(base, limit):
            return
        if not self.chain and not self.walk_to_slo(base, limit):
            return
        if not self.hint_above(base, limit):
            return
        # Hill-climb on the ladder from the incumbent among mns levels.
        while True:
            inc = self.incumbent()
            if inc is None:
                return
            cur = inc.config.max_num_seqs
            if cur is None:  # the baseline leads: look just below where a cap binds
                cur = snap(levels, min(self.never_binds_from(base), max(levels)))
            i = levels.index(cur) if cur in levels else levels.index(snap(levels, cur))
            cands = []
            for j in (i - 1, i + 1):
                if 0 <= j < len(levels):
                    lvl = levels[j]
                    cfg = replace(inc.config, max_num_seqs=lvl)
                    if self.tried(cfg) or not self.space.valid(cfg):
                        continue
                    if lvl >= self.never_binds_from(base) and inc.config.max_num_seqs is None:
                        continue  # same as the baseline under this load
                    pr = predicted(lvl)
                    ref = predicted(cur)
                    if pr is not None and pr < self.opts.refine_margin * (
                            ref if ref is not None else best_pred):
                        continue
                    cands.append((pr if pr is not None else 0.0, lvl, cfg))
            if not cands:
                return
            cands.sort(key=lambda x: (-x[0], -x[1]))
            if not self.first_better([cfg for _pr, _lvl, cfg in cands], "refine", inc):
                return

    def verify_hint(self, base: Trial, limit: int) -> bool:
        """Where vLLM's defaults met the SLO in none of the baseline's runs, or their
        typical run misses it, the planner's hint (the model's knee under the SLO), when
        given, binding and not yet tried, is verified against them: the sweep's probes
        are single noisy runs, and with the defaults missing a cap the model expects to
        meet the SLO is worth one trial. False when the budget stopped the search."""
        hint = self.opts.hint_max_num_seqs
        levels = self.space.max_num_seqs
        # Also where some baseline run met the SLO but their typical run misses.
        missed = (not any(m.goodput_tps > 0 for m in base.runs)
                  or base.attainment(self.slo).typical > 1.0)
        if hint is None or not levels or not missed:
            return True
        cap = snap(levels, hint)
        cfg = Config(max_num_seqs=cap)
        if cap >= limit or self.tried(cfg) or not self.space.valid(cfg):
            return True
        if not self.can_afford(cfg):
            return False
        self.notes.append(f"vLLM's defaults missed the SLO in their typical run: the "
                          f"planner's hint, {cfg.describe()}, verified against them")
        self.first_better([cfg], "verify", base)
        return True

    def hint_above(self, base: Trial, limit: int) -> bool:
        """Where a cap below the planner's hint won against vLLM's defaults
        and the hint was not tried, the hint is compared with the defaults too, and kept
        if it wins and is no slower than that cap. The sweep ranks caps by single noisy
        probes, so the first cap verified is often one or two levels below the model's
        knee, and a one-level step up (1.2-1.3x) is too small for the paired interval to
        call in the pairs a trial affords at the CPU engine's noise. False when the
        budget stopped the search."""
        inc = self.incumbent()
        hint = self.opts.hint_max_num_seqs
        levels = self.space.max_num_seqs
        if (inc is None or inc is base or hint is None or not levels
                or inc.config.max_num_seqs is None):
            return True
        cap = snap(levels, hint)
        cfg = replace(inc.config, max_num_seqs=cap)
        if (cap <= inc.config.max_num_seqs or cap >= limit or self.tried(cfg)
                or not self.space.valid(cfg)):
            return True
        if not self.can_afford(cfg):
            return False
        self.notes.append(f"{inc.config.describe()} won below the planner's hint: "
                          f"{cfg.describe()} compared with vLLM's defaults too")
        trial = self.challenge(cfg, "verify", base)
        if self.beats(trial) and not slower(trial, inc, self.opts.min_gain):
            self.chain.append(trial)
        return True

    def walk_to_slo(self, base: Trial, limit: int, steps: int = 3) -> bool:
        """Where vLLM's defaults miss the SLO in their typical run and no cap has
        won, walk the ladder from the last cap compared with them that lost, toward the
        SLO: a cap whose typical run missed the TTFT objective (the queue of the clients
        beyond the cap) is followed by a larger one, sized by Little's law so that the
        wait shrinks to within the objective; one that missed the ITL objective by the
        next level down. At most ``steps`` caps; it stops at a cap already tried (the
        two objectives leave no level between them), at one whose typical run met the
        SLO and still lost (the defaults' misses are not sure enough to call), and at one
        whose typical run missed both objectives by more than ``min_gain``: a larger cap
        only raises the ITL and a smaller one only lengthens the queue, so no cap meets
        the SLO. False when the budget stopped the search."""
        levels = self.space.max_num_seqs
        if not levels or base.attainment(self.slo).typical <= 1.0:
            return True
        C = self.wl.concurrency
        for _ in range(steps):
            lost = [t for t in self.trials if t.against == base.index and t.ok
                    and t.config.max_num_seqs is not None]
            if not lost:
                return True
            last = lost[-1]
            att = last.attainment(self.slo)
            if att.meets_typically():
                return True
            edge = 1.0 + self.opts.min_gain
            if att.typical_of("TTFT") > edge and att.typical_of("ITL") > edge:
                # The queue's wait only grows below this cap and the ITL only above it:
                # a cap that misses both in its typical run leaves none that meets both.
                self.notes.append(f"{last.config.describe()} missed both objectives in its "
                                  "typical run: no cap meets the SLO (not walked further)")
                return True
            cap = int(last.config.max_num_seqs or 1)
            i = levels.index(cap) if cap in levels else levels.index(snap(levels, cap))
            if att.binding() == "TTFT":
                # The wait of C - b clients behind b running ones grows as C / b - 1 (Little's
                # law); aim at 0.8 of the objective, and at least the next level up.
                ratio = att.typical_of("TTFT")
                want = C / (1.0 + (C / cap - 1.0) * 0.8 / ratio) if cap < C else cap
                nxt = min((lvl for lvl in levels if lvl > cap and lvl >= snap(levels, want)),
                          default=None)
            else:
                nxt = levels[i - 1] if i > 0 else None
            if nxt is None or nxt >= limit:
                return True
            cfg = replace(last.config, max_num_seqs=nxt)
            if self.tried(cfg) or not self.space.valid(cfg):
                return True
            if not self.can_afford(cfg):
                return False
            self.notes.append(f"{last.config.describe()} missed the {att.binding()} objective "
                              f"in its typical run: {cfg.describe()} tried next")
            if self.first_better([cfg], "walk", base):
                return True
        return True

    def search_mnbt(self) -> None:
        levels = self.space.max_num_batched_tokens
        if not levels:
            return
        while True:
            inc = self.incumbent()
            if inc is None:
                return
            cur = inc.config.max_num_batched_tokens or self.space.default_max_num_batched_tokens
            if cur is None:
                cur = levels[len(levels) // 2]
            i = levels.index(snap(levels, cur))
            # The binding constraint decides the direction, and only that one is tried:
            # ITL misses want smaller steps (less prefill mixed into each decode step);
            # TTFT misses, or none (then throughput decides), want more prefill per step.
            ttft_miss = inc.mean_of("ttft_miss")
            itl_miss = inc.mean_of("itl_miss")
            j = i + (-1 if itl_miss > ttft_miss else 1)
            if not 0 <= j < len(levels):
                return
            cfg = replace(inc.config, max_num_batched_tokens=levels[j])
            if self.tried(cfg) or not self.space.valid(cfg):
                return
            if j > i and self.larger_budget_unused(inc.config, cur):
                return
            if not self.first_better([cfg], "batched-tokens", inc):
                return

    def search_chunked(self) -> None:
        """Chunked prefill off against the incumbent (on), where the space searches it:
        one server start, decided by the same paired interval as every other move."""
        if False not in self.space.chunked_prefill:
            return
        inc = self.incumbent()
        if inc is None or not self.space.chunked(inc.config):
            return
        cfg = self.space.without_chunking(inc.config)
        if self.tried(cfg):
            return
        if not self.space.valid(cfg):
            self.notes.append(f"chunked prefill off not tried: {self.space.refusals(cfg)[0]}")
            return
        self.first_better([cfg], "chunked-prefill", inc)

    def larger_budget_unused(self, cfg: Config, budget: int) -> bool:
        """True (and a note says why) when no max-num-batched-tokens above ``budget`` can
        gain ``min_gain`` at ``cfg``: a step schedules at most one prompt's worth of tokens
        for each of at most ``max-num-seqs`` running sequences (a decoding one takes 1), so
        a larger budget adds at most ``max-num-seqs x input - budget`` tokens to a step."""
        mns, _ = self.space.effective(cfg)
        if mns is None:
            return False
        need = mns * self.wl.input_tokens
        if need > budget * (1 + self.opts.min_gain):
            return False
        self.notes.append(
            f"max-num-batched-tokens above {budget} not tried: at max-num-seqs {mns} a step "
            f"needs at most {need} tokens ({mns} prompts of {self.wl.input_tokens}), so a "
            f"larger budget cannot gain the {self.opts.min_gain:.0%} a move must show")
        return True
