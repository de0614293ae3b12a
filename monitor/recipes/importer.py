"""Read a recipe page (docs page with tables and sections, or a PR with one launch script)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from monitor.config import Baseline, Config, Deployment
from monitor.recipes.commands import Command, scan
from monitor.recipes.errors import RecipeError
from monitor.recipes.mapping import Options, Spec, build
from monitor.recipes.sections import Section, find_sections
from monitor.recipes.table import Row, Table, find_tables
from monitor.recipes.values import parse_dataset, parse_mode, parse_seconds, slug


@dataclass
class ImportResult:
    """Deployments in table order, plus warnings about the page as a whole."""

    source: str
    deployments: list[Deployment]
    warnings: list[str] = field(default_factory=list)

    def config(self) -> Config:
        return Config(deployments=self.deployments)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower())


def _match_key(column: str, value: str) -> object:
    if column == "Cards":
        return value.strip()
    if column == "Deploy Mode":
        return parse_mode(value) or _norm(value)
    if column == "TPOT":
        return parse_seconds(value) or _norm(value)
    return _norm(value)


_MATCH_COLUMNS = ("Model", "Hardware", "Cards", "Deploy Mode", "Quantization", "Dataset", "TPOT")


def _matches(row: Row, section: Section) -> bool:
    shared = [c for c in _MATCH_COLUMNS if row.get(c) is not None and c in section.meta]
    return bool(shared) and all(_match_key(c, row.cells[c]) == _match_key(c, section.meta[c]) for c in shared)


def _spec(source: str, line: int, fields: dict[str, str], name: str, group: str | None = None,
          section: Section | None = None) -> Spec:
    cards_text = fields.get("Cards", "").strip()
    if cards_text and not cards_text.isdigit():
        raise RecipeError(source, line, f"Cards must be a whole number, got {cards_text!r}")
    tpot_text = fields.get("TPOT", "").strip()
    tpot = parse_seconds(tpot_text) if tpot_text else None
    if tpot_text and not tpot:
        raise RecipeError(source, line, f"TPOT must be a duration such as 50ms, got {tpot_text!r}")
    mode_text = fields.get("Deploy Mode", "").strip()
    mode = parse_mode(mode_text) if mode_text else None
    if mode_text and mode is None:
        raise RecipeError(source, line, f"Deploy Mode must be 'PD Mixed' or 'PD Disaggregation', got {mode_text!r}")
    dataset = fields.get("Dataset", "").strip() or None
    shape = parse_dataset(dataset) if dataset else None
    spec = Spec(source, line, name, model=fields.get("Model"), hardware=fields.get("Hardware"),
                cards=int(cards_text) if cards_text else None, mode=mode, dataset=dataset, shape=shape,
                tpot_target=tpot, quantization=fields.get("Quantization"), group=group)
    if dataset and shape is None:
        spec.warnings.append(f"line {line}: dataset {dataset!r} is in no form the importer knows; shape left unset")
    if section is not None:
        spec.title, spec.section_line = section.title or None, section.title_line
        spec.warnings.extend(_title_checks(section, spec))
    return spec


def _title_checks(section: Section, spec: Spec) -> list[str]:
    """The section title encodes cards, PD split and TPOT too: say so when it disagrees."""
    out: list[str] = []
    title = section.title
    cards = re.search(r"\b(\d+)P\b", title)
    if cards and spec.cards and int(cards.group(1)) != spec.cards:
        out.append(f"section title {title!r} (line {section.title_line}) says {cards.group(1)}P, the table {spec.cards} cards")
    pd = re.search(r"\b\d+P\d+D\b", title)
    if pd and spec.mode == "pd-mixed":  # titles of mixed rows name no split, so only this way round
        out.append(f"section title {title!r} (line {section.title_line}) and Deploy Mode {spec.mode} disagree")
    tpot = re.search(r"\b(\d+(?:\.\d+)?)ms\b", title)
    if tpot and spec.tpot_target and abs(float(tpot.group(1)) / 1000 - spec.tpot_target) > 1e-9:
        out.append(f"section title {title!r} (line {section.title_line}) says {tpot.group(0)}, the table TPOT differs")
    return out


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


def _longest_increasing(seq: list[int]) -> set[int]:
    """Positions of one longest increasing subsequence: the rest are the rows "out of place"."""
    best: list[list[int]] = []
    for k, v in enumerate(seq):
        prev = max((b for b in best if seq[b[-1]] < v), key=len, default=[])
        best.append([*prev, k])
    return set(max(best, key=len, default=[]))


def _row_name(fields: dict[str, str]) -> str:
    return slug("-".join(fields.get(k, "") for k in ("Model", "Cards", "Deploy Mode", "Dataset", "TPOT")))


def _import_page(lines: list[str], source: str, tables: list[Table], options: Options) -> ImportResult:
    rows = [r for t in tables if t.is_deployments for r in t.rows]
    stops = {t.group for t in tables if t.group} | {r.cells.get("Configuration", "") for r in rows}
    sections, repeats = find_sections(lines, {s for s in stops if s})
    warnings: list[str] = []
    if repeats:
        warnings.append(
            f"the page repeats {len(repeats)} section titles without content (lines {repeats[0]}–{repeats[-1]}, "
            "a table of contents); ignored"
        )
    for s in sections:
        extra = [k for k in s.meta if k not in _MATCH_COLUMNS]
        if extra:
            warnings.append(
                f"line {s.meta_line}: the section's Model line also has {', '.join(f'{k}: {s.meta[k]!r}' for k in extra)}"
            )
    taken: set[str] = set()
    deployments: list[Deployment] = []
    if not rows:  # sections without a table: each Model line is the row
        for s in sections:
            spec = _spec(source, s.meta_line, s.meta, _unique(slug(s.title) if s.title else _row_name(s.meta), taken),
                         section=s)
            deployments.append(build(spec, scan(s.body, s.body_start, source), options))
        return ImportResult(source, deployments, warnings)

    used: dict[int, int] = {}
    pairs: list[tuple[Row, int]] = []
    for row in rows:
        hits = [i for i, s in enumerate(sections) if _matches(row, s)]
        if len(hits) > 1:
            where = ", ".join(str(sections[i].meta_line) for i in hits)
            raise RecipeError(source, row.line, f"table row matches {len(hits)} sections (lines {where}); "
                                                "their Model/Cards/Deploy Mode/Dataset/TPOT lines must differ")
        section = sections[hits[0]] if hits else None
        if section is not None:
            if hits[0] in used:
                raise RecipeError(source, row.line, f"table row matches the same section (line "
                                                    f"{section.meta_line}) as the row on line {used[hits[0]]}")
            used[hits[0]] = row.line
            pairs.append((row, hits[0]))
        name = _unique(slug(section.title) if section and section.title else _row_name(row.cells), taken)
        spec = _spec(source, row.line, row.cells, name, row.group, section)
        if section is None:
            spec.warnings.append(
                f"table row on line {row.line} has no 'Optimal Configuration' section with a matching "
                "Model/Cards/Deploy Mode/Dataset/TPOT line: no launch commands, no targets"
            )
            commands: list[Command] = []
        else:
            commands = scan(section.body, section.body_start, source)
        deployments.append(build(spec, commands, options))
    keep = _longest_increasing([i for _, i in pairs])
    moved = [f"the row on line {r.line} has its section on line {sections[i].title_line}"
             for k, (r, i) in enumerate(pairs) if k not in keep]
    if moved:
        warnings.append(
            "the sections appear in a different order from the table rows; matched by their "
            f"'Model: … Cards: … Deploy Mode: … Dataset: … TPOT: …' line, not by position ({'; '.join(moved)})"
        )
    for i, s in enumerate(sections):
        if i not in used:
            warnings.append(f"section {s.title!r} (line {s.title_line}) matches no table row; ignored")
    return ImportResult(source, deployments, warnings)


# --- a PR or script: one launch command, measured results in prose or a Metric/Value table ---------
_PR_TITLE = re.compile(r"Pull Request #(\d+)\s*·\s*([\w.-]+/[\w.-]+)")
_SHAPE_LINE = re.compile(r"\b(\d+(?:\.\d+)?[kKmM]?)\s*in\s+(\d+(?:\.\d+)?[kKmM]?)\s*out\b")
_NUMBER = re.compile(r"([0-9]*\.?[0-9]+)\s*([a-zA-Z/]*)")


def _baseline(tables: list[Table], source: str, ref: str | None, warnings: list[str]) -> Baseline | None:
    values: dict[str, float] = {}
    first_line = None
    for table in (t for t in tables if t.is_metrics):
        for row in table.rows:
            key, value = _norm(row.cells["Metric"]), row.cells["Value"]
            m = _NUMBER.match(value.strip())
            if not m:
                continue
            number, unit = float(m.group(1)), m.group(2).lower()
            first_line = first_line or table.line
            if key in ("mean ttft", "mean tftt", "avg ttft", "ttft"):
                if key == "mean tftt":
                    warnings.append(f"line {row.line}: the source writes 'Mean TFTT'; read as mean TTFT")
                values["ttft_mean_seconds"] = parse_seconds(f"{number}{unit or 'ms'}") or number
            elif key in ("mean tpot", "avg tpot", "tpot"):
                values["tpot_mean_seconds"] = parse_seconds(f"{number}{unit or 'ms'}") or number
            elif "throughput" in key and unit.startswith("tok"):
                values["output_throughput_tokens_per_second"] = number
                if key == "throughput":
                    warnings.append(
                        f"line {row.line}: 'Throughput {value}' is read as output throughput (the source does not "
                        "say whether it is per request or in total)"
                    )
    if not values:
        return None
    where = f"{source}:{first_line}"
    return Baseline(**values, source=f"{ref}, {where}" if ref else where)


def _import_script(lines: list[str], source: str, tables: list[Table], options: Options) -> ImportResult:
    commands = scan(lines, 1, source)
    servers = [c for c in commands if c.kind == "server"]
    if not servers:
        raise RecipeError(
            source, 1, "no recipe table, no 'Model: … Cards: …' section and no sglang server command "
            "(python3 -m sglang.launch_server / sglang serve) found"
        )
    title = next((ln.strip() for ln in lines if ln.strip()), "")
    pr = _PR_TITLE.search(title)
    ref = f"{pr.group(2)}#{pr.group(1)}" if pr else None
    warnings: list[str] = []
    main = servers[0]
    model_path = main.value("--served-model-name") or main.value("--model-path") or "unknown"
    model = Path(model_path).name or model_path
    hw = re.search(r"\bon\s+(A\d+)\b", title)
    hardware = f"Ascend {hw.group(1)}" if hw and ("NPU" in title or main.value("--device") == "npu") else None
    spec_warnings = [f"hardware {hardware!r} is inferred from the title ('… on {hw.group(1)} …')"] if hw and hardware else []
    nnodes, tp = main.int("--nnodes") or 1, main.int("--tp-size")
    spec_warnings.append(
        f"the source gives no card count (the script runs --tp-size {tp} over --nnodes {nnodes}); cards left unset"
    )
    shape_line = next(((i + 1, m) for i, ln in enumerate(lines) if (m := _SHAPE_LINE.search(ln))), None)
    dataset = f"{shape_line[1].group(1)}+{shape_line[1].group(2)}" if shape_line else None
    if shape_line:
        spec_warnings.append(f"dataset {dataset!r} from line {shape_line[0]}: {lines[shape_line[0] - 1].strip()!r}")
    algo = main.value("--speculative-algorithm")
    name = slug("-".join(p for p in (model, hw.group(1) if hw else None, f"tp{tp}" if tp else None,
                                     algo.lower() if algo else None) if p))
    baseline = _baseline(tables, source, ref, spec_warnings)
    spec = Spec(source, main.line, name, model=model, hardware=hardware, cards=None,
                mode=None, dataset=dataset, shape=parse_dataset(dataset) if dataset else None,
                quantization=main.value("--quantization"), title=title or None, warnings=spec_warnings)
    spec.warnings.append(
        "the source states no TPOT target: no TPOT SLO"
        + (f"; its measured mean TPOT {baseline.tpot_mean_seconds * 1000:g} ms is kept as the baseline for "
           "regression alerts" if baseline and baseline.tpot_mean_seconds else "")
    )
    if len(servers) > 1 and not any(c.value("--disaggregation-mode") for c in servers):
        warnings.append(f"{len(servers)} server commands in one script; all are targets of one deployment")
    return ImportResult(source, [build(spec, commands, options, baseline)], warnings)


def import_text(text: str, source: str, options: Options) -> ImportResult:
    lines = text.splitlines()
    tables = find_tables(lines, source)
    has_page = any(t.is_deployments for t in tables) or any(ln.lstrip().startswith("Model:") for ln in lines)
    result = (_import_page if has_page else _import_script)(lines, source, tables, options)
    if not result.deployments:
        raise RecipeError(source, 1, "found a recipe table but no deployment in it")
    try:
        result.config()  # names unique, everything valid: what we print must load
    except ValueError as err:
        raise RecipeError(source, None, f"imported config does not validate: {err}") from None
    return result
