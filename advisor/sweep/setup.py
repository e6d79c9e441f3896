"""A sweep's start, in one place: its options resolved (a --config file merged in, or an
interrupted sweep's options taken back) and checked once, before anything loads torch;
then its run directory with a typed manifest (this host probed, the dtype chosen), or the
interrupted one's, and the placements it measures."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.engines.engine import Engine
from advisor.engines.placement import Placement
from advisor.errors import UsageError
from advisor.flag_groups import parse_engine
from advisor.probe import hardware, p2p
from advisor.rundata.files import RunDataError
from advisor.rundata.manifest import DtypeRan, Manifest, MeasuredLink, ProbeFindings
from advisor.rundata.rundir import MANIFEST, RunDir
from advisor.sweep.config_file import merged
from advisor.sweep.options import SweepOptions
from engine import api
from engine.api import DtypeChoice

ELSEWHERE = ("not measured: the deployments' KV crosses their own links, not this host's "
             "(their transfers come from the decoders' metrics)")


@dataclass(frozen=True)
class SweepSetup:
    """What a sweep measures with: its run directory and manifest, its options as run (the
    dtype chosen, the model and SLO filled in) and its placements."""

    run_dir: RunDir
    manifest: Manifest
    opts: SweepOptions
    engine: Engine  # what starts the placements
    placements: list[Placement]


def resolved(opts: SweepOptions, resume: str | None) -> tuple[RunDir | None, SweepOptions]:
    """The options to run with, checked (UsageError naming a bad flag), and the run
    directory to go on in where `resume` names one; loads no torch."""
    if opts.config:
        opts = merged(opts, opts.config)
    if resume:
        run_dir, opts = _resumed(resume, opts)
        opts.validate()
        return run_dir, opts
    opts.check()
    return None, opts


def setup(opts: SweepOptions, resume: RunDir | None = None,
          argv: list[str] | None = None) -> SweepSetup:
    """A new sweep's run directory and manifest, or (with `resume` and the options
    `resolved` took back) the interrupted sweep's; with the engine that starts its
    placements (advisor.engines) and the placements, each P/D on GPUs put on pairs with
    P2P."""
    if resume is None:
        run_dir, manifest, opts = _created(opts, argv)
    else:
        run_dir, manifest = resume, resume.read_manifest()
    probe = manifest.probe
    matrix = p2p.P2PMatrix.from_record(probe.p2p) if probe is not None and probe.p2p else None
    engine = opts.engine_to_start(opts.dtype)
    placements = engine.placements(opts.topology_specs, matrix)
    ran = engine.ran(placements)
    if ran is not None:
        print(f"engine: {ran.distribution} {ran.version} ({ran.python}), model "
              f"{ran.model_dir}", flush=True)
        manifest = run_dir.update_manifest(engine=ran)
    return SweepSetup(run_dir, manifest, opts, engine, placements)


def _created(opts: SweepOptions, argv: list[str] | None
             ) -> tuple[RunDir, Manifest, SweepOptions]:
    """A new run directory with its manifest; the options with dtype, model and SLO filled."""
    # NOTE: only a default SLO on the default model may be widened to fit this machine
    widen = not opts.slo and opts.model is None and opts.local
    filled = dataclasses.replace(opts, model=opts.model_to_run(), slo=opts.judged_slo)
    choice = api.resolve_dtype(opts.dtype, opts.device) if opts.local else DtypeChoice(
        opts.dtype, "set by the deployment", {})
    run_dir = RunDir.create(opts.out, opts.workload)
    config = {k: v for k, v in dataclasses.asdict(filled).items() if k != "api_key"}
    manifest = run_dir.write_manifest(Manifest.new(
        opts.seed, config, argv, probe=_probe(opts),
        dtype=DtypeRan(opts.dtype, choice.dtype, choice.reason, choice.gflops),
        widen_slo=widen, config_file=Path(opts.config).read_text() if opts.config else None))
    print(f"dtype: {choice.dtype} ({choice.reason})", flush=True)
    return run_dir, manifest, dataclasses.replace(filled, dtype=choice.dtype)


def _probe(opts: SweepOptions) -> ProbeFindings:
    """What probing this host finds: GPUs, the P2P matrix, and its KV links only where the
    bundled engine's KV crosses them."""
    gpus, note = hardware.inventory()
    matrix, source = p2p.read(opts.p2p_matrix) if opts.p2p_matrix or gpus else (None, None)
    links = {name: MeasuredLink(v["gbps"], v["ms"], v["bytes"])
             for name, v in api.host_links(16 << 20).items()} if opts.local else None
    return ProbeFindings(hardware.gpus_found(gpus), note, matrix.record() if matrix else None,
                         source, links, None if opts.local else ELSEWHERE)


def _resumed(resume: str, given: SweepOptions) -> tuple[RunDir, SweepOptions]:
    """The run directory of an interrupted sweep and the options it ran with; RunDataError
    names a missing or damaged one. Nothing read from it is run or trusted with a secret:
    the commands that start its deployments come from the command line (`given`) alone,
    and with an API key so do the URLs it is sent to; UsageError names a missing one."""
    try:
        run_dir = RunDir.existing(resume)
    except RunDataError as e:
        raise RunDataError(f"--resume {e}") from None
    manifest = run_dir.read_manifest()
    names = {f.name for f in dataclasses.fields(SweepOptions)}
    where = f"{run_dir.path / MANIFEST}: config"
    config: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                              for k, v in manifest.config.options().items() if k in names}
    config["slo"] = manifest.config.slo  # typed as read
    try:
        config["engine"] = parse_engine(config.get("engine", "bundled"))
    except UsageError as e:
        raise RunDataError(f"{where}.engine: {e}") from None
    try:
        opts = SweepOptions(**config)
    except TypeError as e:
        raise RunDataError(f"{run_dir.path / MANIFEST}: config: {e}") from None
    for kind in ("collocated", "disagg"):
        cmd, url = f"{kind}_cmd", f"{kind}_url"
        if getattr(opts, cmd) and not getattr(given, cmd):
            raise UsageError(f"--resume: this sweep started its deployment with --{kind}-cmd; "
                             f"give --{kind}-cmd again (a run directory's commands are never "
                             "run)")
        if getattr(opts, url) and given.api_key and not getattr(given, url):
            raise UsageError(f"--resume with an API key: give --{kind}-url again (the key "
                             "goes only to URLs named on the command line)")
        opts = dataclasses.replace(opts, **{cmd: getattr(given, cmd),
                                            url: getattr(given, url) or getattr(opts, url)})
    if opts.toy_proxy and not given.toy_proxy:
        raise UsageError("--resume: this sweep ran vLLM's toy proxy; give --toy-proxy again (a "
                         "run directory's programs are never run)")
    opts = dataclasses.replace(opts, toy_proxy=given.toy_proxy)
    ran = manifest.dtype_ran or opts.dtype  # as the interrupted sweep ran
    return run_dir, dataclasses.replace(opts, dtype=ran, model=opts.model_to_run(),
                                        slo=opts.judged_slo, api_key=given.api_key)
