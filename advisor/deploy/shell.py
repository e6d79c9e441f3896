"""A deployment as shell: one section per placement, its commands in start order, every
process but the last in the background, each command under the host it runs on."""

from __future__ import annotations

from advisor.rundata.recommendation import DeployCommands


def comment(text: str) -> str:
    """`text` as one comment line, shell's or YAML's: whatever would end the line (a newline,
    any other control or separator character) written as its escape, so that nothing a run
    directory or an imported file holds becomes a line of its own."""
    return "# " + "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def as_shell(deploy: DeployCommands) -> str:
    """The script, with what it assumes as comment lines."""
    lines = [comment(f"{deploy.model} on GPUs {','.join(map(str, deploy.gpus))}")]
    if deploy.measured_on and not deploy.elsewhere:
        lines.append(comment(f"evidence from {deploy.measured_on}"))
    lines += [comment(f"NOTE: {n}") for n in deploy.notes]
    for plan in deploy.plans:
        mark = "" if plan.placement != deploy.recommended else \
            " (favoured where measured, not here)" if deploy.elsewhere else " (recommended)"
        lines += ["", comment(f"--- {plan.placement}{mark}")]
        lines += [comment(n) for n in plan.notes]
        host = None
        for i, c in enumerate(plan.commands):
            if c.host and c.host != host:
                lines.append(comment(f"on {c.host}:"))
                host = c.host
            lines.append(c.shell() + (" &" if i < len(plan.commands) - 1 else ""))
    return "\n".join(lines) + "\n"
