"""How the leaderboard's preset was chosen, step by step, from the earlier grids' summaries: each grid's winner
(`hw3lib.experiments.compare.pick_winner`, the same pick `grids.choices_from` makes when the sweep runs), the
settings it contributes, which later choice overrides which, and the final preset against what the leaderboard run
used."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hw3lib.core import io as core_io  # figures_dir looked up at call time (tests point it elsewhere)
from hw3lib.experiments.compare import pick_winner, row_noise
from hw3lib.experiments.grids import GRIDS, winner_settings
from hw3lib.experiments.render import noise, points

if TYPE_CHECKING:  # facts imports nothing from here; the answer builders and the summary pass Facts in
    from hw3lib.experiments.facts import Facts


def summary_choice(summary: dict) -> dict:
    """What `hw3lib.experiments.grids.choices_from` picks, read from a grid's summary (`grid_summary`): the same
    `pick_winner` on its rows; the winner's changes are the settings it contributes (`winner_settings`)."""
    pick = pick_winner(summary["rows"], summary["reference"])
    config = summary["configs"][pick.winner["label"]]
    settings = winner_settings(summary["grid"], config["changes"], config.get("loss_type", pick.winner["label"]))
    return {"winner": pick.winner, "reference_won": pick.reference_won, "settings": settings,
            "best_other": pick.best_other}


def _earlier_summaries(facts: Facts) -> dict[str, dict | None]:
    """The summaries of the grids the leaderboard takes its settings from (in `run_sweep`'s order):
    `facts.earlier`, else `figures/grid_<name>.json`; None where missing or from another profile."""
    found = {}
    for name in GRIDS["leaderboard"].needs:
        if facts.earlier is not None:
            summary = facts.earlier.get(name)
        else:
            path = core_io.figures_dir() / f"grid_{name}.json"
            summary = json.loads(path.read_text()) if path.is_file() else None
        found[name] = summary if summary is not None and summary.get("profile") == facts.grid.profile else None
    return found


def _settings_text(settings: dict) -> str:
    return ", ".join(f"{key} = {value}" for key, value in settings.items())


def _selection_step(name: str, summary: dict, pick: dict, overrides: list[str]) -> dict:
    winner, reference = pick["winner"], summary["reference"]
    if not pick["reference_won"]:
        head = (f"`{name}`: winner `{winner['label']}`, {points(winner['diff'])} vs `{reference}` "
                f"({noise(row_noise(winner))})")
    else:
        other = pick["best_other"]
        head = f"`{name}`: no config beat `{reference}` beyond noise" + (
            f" (best other: `{other['label']}`, {points(other['diff'])}, {noise(row_noise(other))})"
            if other else "") + f", so `{reference}` stands"
    head += (f"; it contributes {_settings_text(pick['settings'])}" if pick["settings"]
             else "; it contributes nothing (its settings are the base's)")
    return {"grid": name, "winner": winner["label"], "reference": reference, "diff": winner["diff"],
            "band": winner["band"], "beyond_noise": not pick["reference_won"], "settings": pick["settings"],
            "overrides": overrides, "text": head + "".join(f"; {o}" for o in overrides) + "."}


def _override(key: str, value, name: str, pick: dict, earlier: tuple[str, object, dict]) -> str:
    grid, old, old_pick = earlier
    text = f"its {key} = {value} overrides `{grid}`'s choice {key} = {old}"
    if not old_pick["reference_won"]:
        w = old_pick["winner"]
        text += (f", dropping `{w['label']}`, which beat `{old_pick['reference']}` by {points(w['diff'])} "
                 f"({noise(row_noise(w))})")
        if pick["reference_won"]:
            text += f" -- replaced by `{name}`'s reference, which beat nothing beyond noise"
    return text


def leaderboard_selection(facts: Facts) -> list[dict]:
    """How the leaderboard's preset was chosen (`run_sweep`): one step per contributing grid in order -- its
    winner (diff ± band vs its reference, beyond noise or not), the settings it contributes and which earlier
    choice each overrides -- then the final preset, checked against the settings the leaderboard run used."""
    summaries, picks, steps = _earlier_summaries(facts), {}, []
    chosen: dict[str, tuple[str, object, dict]] = {}  # setting -> (grid, value, its pick), the latest wins
    for name, summary in summaries.items():
        if summary is None:
            steps.append({"grid": name, "text": f"`{name}`: not reported yet for the {facts.grid.profile} profile "
                                                f"(no figures/grid_{name}.json), so its choice is unknown here."})
            continue
        pick = picks[name] = {**summary_choice(summary), "reference": summary["reference"]}
        if name == "clip_ablation" and picks.get("off_policy_focused", {}).get("reference_won"):
            steps.append({"grid": name, "text": "`clip_ablation`: not used: on-policy (the reference of "
                                                "`off_policy_focused`) won, so the clip setting does not apply."})
            continue
        overrides = [_override(key, value, name, pick, chosen[key]) for key, value in pick["settings"].items()
                     if key in chosen and chosen[key][1] != value]
        chosen.update({key: (name, value, pick) for key, value in pick["settings"].items()})
        steps.append(_selection_step(name, summary, pick, overrides))
    return steps + [_final_step(facts, chosen, picks, [n for n, s in summaries.items() if s is None])]


def _final_step(facts: Facts, chosen: dict, picks: dict, missing: list[str]) -> dict:
    def plain(value):
        return json.loads(json.dumps(value))  # tuples -> lists, as in the summaries

    base = facts.grid.base
    final = {key: value for key, (_, value, _) in chosen.items()}
    preset = {key: value for key, value in final.items() if plain(getattr(base, key, None)) != plain(value)}
    as_base = {key: value for key, value in final.items() if key not in preset}
    used = {key: value for key, value in facts.grid.changes[facts.grid.reference].items() if key != "seed"}
    text = f"Final preset: {_settings_text(preset) or 'the base recipe unchanged'}"
    if as_base:
        text += f" ({_settings_text(as_base)}: the base recipe's own value, so no change)"
    dropped = [f"`{p['winner']['label']}` (`{name}`)" for name, p in picks.items() if not p["reference_won"]
               and any(key in chosen and chosen[key][1] != value for key, value in p["settings"].items())]
    if dropped:
        text += f". Beyond-noise winners overridden by a later grid's choice: {', '.join(dropped)}"
    if missing:
        text += f". Incomplete: {', '.join(f'`{m}`' for m in missing)} not reported yet"
    text += (". The leaderboard run used exactly these settings." if plain(preset) == plain(used) else
             f". The leaderboard run used {_settings_text(used) or 'the base recipe unchanged'}, not these: the "
             "earlier grids' reports changed after it ran (rerun `leaderboard`).")
    return {"grid": "final", "settings": preset, "used": used, "dropped": dropped, "text": text}
