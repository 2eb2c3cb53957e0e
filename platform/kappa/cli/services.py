"""``kappa <service> start|stop|status [--format json]``, built for every local part from one
factory over :class:`~kappa.core.service.LocalService` (:func:`kappa.services.services`)."""

from __future__ import annotations

import typer
from rich.console import Console

from kappa.cli.command import guarded
from kappa.cli.output import StatusFormat, format_option
from kappa.config import Settings
from kappa.core.service import LocalService


def _stopped(what: object) -> str:
    if isinstance(what, dict):
        return ", ".join(f"{n} (pid {p})" for n, p in what.items()) or "nothing (not running)"
    return f"pid {what}"


def service_app(service: LocalService, console: Console, *, custom_start: bool = False) -> typer.Typer:
    """The Typer group of ``service``: ``start`` (unless ``custom_start``: the caller adds its own),
    ``stop`` and ``status``. Expected errors print one line and exit 1 (:class:`Guard`)."""
    group = typer.Typer(help=service.help, no_args_is_help=not custom_start, invoke_without_command=custom_start)

    if not custom_start:
        @group.command("start")
        @guarded
        def start(settings: Settings, timeout: float = typer.Option(service.start_timeout_s, help="Seconds to wait for it to answer.")) -> None:
            """Start it in the background (state under KAPPA_HOME) and wait until it answers."""
            with console.status(f"starting the {service.title}…"):
                st = service.start(settings, timeout_s=timeout)
            first, *rest = st.summary()
            console.print(f"{service.title} [green]up[/] {first}", highlight=False, soft_wrap=True)
            for line in rest:
                console.print(line, highlight=False, soft_wrap=True)

    @group.command("stop")
    @guarded
    def stop(settings: Settings) -> None:
        """Stop it cleanly (its state and logs stay)."""
        console.print(f"{service.title} stopped ({_stopped(service.stop(settings))})", highlight=False)

    @group.command("status")
    @guarded
    def status(settings: Settings, fmt: StatusFormat = format_option()) -> None:
        """Whether it is up, and how to reach it. Exit status 0 either way."""
        st = service.status(settings)
        if fmt == StatusFormat.json:
            print(st.to_json())
            return
        first, *rest = st.summary()
        state = "[green]up[/]" if st.up else "[red]down[/]"
        console.print(f"{service.title} {state} {first}", highlight=False, soft_wrap=True)
        for line in rest:
            console.print(line, highlight=False, soft_wrap=True)

    return group
