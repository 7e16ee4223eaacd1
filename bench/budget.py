"""The budget question: whether a run's losses had flattened by its end, read per objective over the quarters
of its own logs, and the page's table of every trained run's steps, tokens, minutes and head-only warm-up."""

from __future__ import annotations

from bench.reporting import fmt, table
from bench.study import Comparison

FLAT = 0.01
"""A loss that moved by at most this share of itself between the third and the last
quarter of a run's logs had flattened; one that fell by more was still falling (the row's budget is in question)."""


def quarter_means(values: list[float]) -> list[float]:
    """Means of a logged curve's four consecutive quarters (the last takes the remainder); [] under 4 values."""
    if len(values) < 4:
        return []
    q = len(values) // 4
    parts = [values[:q], values[q : 2 * q], values[2 * q : 3 * q], values[3 * q :]]
    return [sum(p) / len(p) for p in parts]


def loss_trend(quarters: list[float], flat: float = FLAT) -> str:
    """'flat', 'still falling' or 'rising': the loss from the third quarter of the logs to the last, against
    `flat` of its size."""
    if len(quarters) != 4:
        return "-"
    change, size = quarters[3] - quarters[2], max(abs(quarters[3]), 1e-9)
    return "still falling" if change < -flat * size else "rising" if change > flat * size else "flat"


def _seed0(section: dict, arm: str) -> dict:
    return section["results"].get(arm, {}).get("0", {})


def still_falling(c: Comparison, section: dict) -> list[str]:
    """The comparison's trained arms (seed 0) with an objective whose loss still fell in its last quarter
    (`loss_trend`), as "arm: objective"."""
    out = []
    for arm in c.arms:
        quarters = _seed0(section, arm.name).get("train", {}).get("loss_quarters", {})
        out += [f"{arm.name}: {name}" for name, q in quarters.items() if loss_trend(q) == "still falling"]
    return list(dict.fromkeys(out))


def budget_table(loaded: dict) -> list:
    """The budget of every trained run: the head-only steps before it (not counted), its steps, tokens and
    training minutes, and whether its total loss had flattened by the end (bench/budget.py `loss_trend`); a run
    shared by sections is listed once, runs summarised before these fields were logged show '-'."""
    body, seen = [], set()
    for name, section in loaded.items():
        for arm, seeds in section["results"].items():
            for seed, result in seeds.items():
                train, warm = result.get("train"), result.get("head_warmup")
                if not train or (arm, seed, train.get("seconds")) in seen:
                    continue
                seen.add((arm, seed, train.get("seconds")))
                head = "-"
                if warm:
                    cost = [f"{warm['tokens']:,} tokens"] if "tokens" in warm else []
                    cost += [f"{warm['seconds'] / 60:.1f} min"] if "seconds" in warm else []
                    head = f"{warm['steps']} steps, MLM loss {warm['loss'][0]:.2f} -> {warm['loss'][1]:.2f}"
                    head += f" ({', '.join(cost)})" if cost else ""
                quarters = train.get("loss_quarters", {})
                trends = {name: loss_trend(q) for name, q in quarters.items()}
                moving = [f"{name} {trend}" for name, trend in trends.items() if trend != "flat"]
                body.append(
                    [
                        f"{name}: `{arm}`",
                        seed,
                        head,
                        fmt(train.get("steps")),
                        f"{train['tokens']:,}" if train.get("tokens") else "-",
                        fmt(train["seconds"] / 60 if train.get("seconds") else None),
                        "<br>".join(f"{n} " + " / ".join(f"{v:.2f}" for v in q) for n, q in quarters.items()) or "-",
                        ("; ".join(moving) or "flat") if trends else "-",
                    ]
                )
    if not any(row[4] != "-" for row in body):
        return []
    header = ["section: arm", "seed", "head alone first (not counted)", "steps", "tokens", "training minutes",
              "loss by quarter of its logs", "last quarter"]  # fmt: skip
    return [
        "## Budget per trained run",
        "",
        f"Each objective's loss averaged over each quarter of its logs (an objective that joins half way, as "
        f"BTMLM, from where it joins); 'flat' when every one moved by at most {FLAT:.0%} of itself from the third "
        "quarter to the last, else the ones still falling (a longer run could still move the row: its budget is in "
        "question) or rising. The learning rate decays linearly to 0, so part of any flattening at the end is the "
        "schedule's.",
        "",
        table(header, body),
    ]
