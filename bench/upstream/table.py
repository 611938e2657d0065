"""Prints run.sh's comparison table from the files each size left in OUT/pods-N/.

usage: table.py OUT JOINTER_BIN N...
"""

import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def mib(n):
    return f"{n / 2**20:,.0f} MiB"


def row(cells, widths):
    return "  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def main():
    out, jointer_bin, sizes = sys.argv[1], sys.argv[2], sys.argv[3:]
    header = ["pods", "solver", "s/solve", "pods/s", "nodes", "$/hour", "unschedulable", "peak RSS",
              "bound last refused", "upstream re-check"]
    rows, notes = [], []
    for n in sizes:
        d = os.path.join(out, f"pods-{n}")
        up = load(os.path.join(d, "upstream.json"))
        jo = load(os.path.join(d, "jointer.json"))
        run = load(os.path.join(d, "jointer.run.json")) or {}
        recheck = load(os.path.join(d, "recheck.json"))
        if jo and "solve_seconds" not in jo:
            # With --output json, simulate reports a refusal as {"ok": false, "diagnostics": [...]}.
            for diag in jo.get("diagnostics", []):
                msg = diag.get("message", "")
                notes.append(f"{n} pods: jointer: {msg[:400]}{' ...' if len(msg) > 400 else ''}")
            jo = None
        if up:
            rows.append([n, "upstream", f"{up['solve_seconds']:.3f}", f"{up['pods'] / up['solve_seconds']:,.0f}",
                         str(up["nodes"]), f"{up['price_per_hour']:,.2f}", str(up["unschedulable"]),
                         mib(up["peak_rss_bytes"]), str(up.get("refused_if_bound_last", "-")), "-"])
        if jo:
            own = jo.get("refused_if_bound_last")
            if recheck:
                # The harness's count of jointer's plan; jointer's own beside it when they differ.
                bound_last = str(recheck["refused_if_bound_last"])
                if own is not None and own != recheck["refused_if_bound_last"]:
                    bound_last += f" (jointer: {own})"
                rechecked = f"refused {recheck['refused']} of {recheck['replayed']}"
                bad = {k: recheck.get(k, 0) for k in ("missing_from_binding_order", "placed_twice", "not_placed")}
                if any(bad.values()):
                    rechecked += " !"
                    notes.append(f"{n} pods: jointer's binding_order: " +
                                 ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in bad.items()))
                for ex in recheck.get("refused_examples", []) + recheck.get("plan_problem_examples", []):
                    notes.append(f"{n} pods: re-check: {ex[:400]}{' ...' if len(ex) > 400 else ''}")
            else:
                bound_last = f"{own} (jointer)" if own is not None else "-"
                rechecked = "not run" if "binding_order" in jo else "no binding_order"
            rows.append([n, "jointer", f"{jo['solve_seconds']:.3f}", f"{int(n) / jo['solve_seconds']:,.0f}",
                         str(jo["nodes"]), f"{jo['total_price_per_hour']:,.2f}", str(len(jo["unschedulable"])),
                         mib(run.get("peak_rss_bytes", 0)), bound_last, rechecked])
        else:
            rows.append([n, "jointer", f"failed (exit {run.get('exit', '?')})"] + [""] * 7)
            notes.append(f"{n} pods: jointer's full output: {os.path.join(d, 'jointer.json')} and jointer.err")
        if up and jo:
            rows.append([n, "ratio", f"{up['solve_seconds'] / jo['solve_seconds']:,.1f}x faster", "",
                         f"{jo['nodes'] - up['nodes']:+d}", f"{jo['total_price_per_hour'] / up['price_per_hour']:.3f}",
                         "", f"{up['peak_rss_bytes'] / max(run.get('peak_rss_bytes', 0), 1):.1f}x less", "", ""])
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    print(row(header, widths))
    print(row(["-" * w for w in widths], widths))
    for r in rows:
        print(row(r, widths))
    print()
    print("upstream: sigs.k8s.io/karpenter v1.15.0 Scheduler.Solve (setup excluded, as in its benchmark)")
    print(f"jointer:  {jointer_bin} simulate, solve_seconds (the solver alone)")
    print("ratio:    time and RSS upstream / jointer; $/hour jointer / upstream (below 1 = jointer cheaper);")
    print("          nodes jointer - upstream")
    print("bound last refused: DoNotSchedule spread pods kube-scheduler would refuse if each bound after")
    print("          every other pod of the plan (the harness's count, the same code for both plans)")
    print("upstream re-check: jointer's plan replayed in its binding_order through upstream's Topology")
    print("          (AddRequirements, then Record): pods refused of pods replayed; ! = pods missing or")
    print("          placed twice")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
