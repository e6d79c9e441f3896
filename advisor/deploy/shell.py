"""A deployment as shell: one section per placement, its commands in start order, every
process but the last in the background, each command under the host it runs on."""

from __future__ import annotations

from advisor.rundata.recommendation import Deployment


def as_shell(deploy: Deployment) -> str:
    """The script, with what it assumes as comment lines."""
    lines = [f"# {deploy.model} on GPUs {','.join(map(str, deploy.gpus))}"]
    lines += [f"# NOTE: {n}" for n in deploy.notes]
    for plan in deploy.plans:
        mark = " (recommended)" if plan.placement == deploy.recommended else ""
        lines += ["", f"# --- {plan.placement}{mark}"]
        lines += [f"# {n}" for n in plan.notes]
        host = None
        for i, c in enumerate(plan.commands):
            if c.host and c.host != host:
                lines.append(f"# on {c.host}:")
                host = c.host
            lines.append(c.shell() + (" &" if i < len(plan.commands) - 1 else ""))
    return "\n".join(lines) + "\n"
