"""``kappa serve``: the SQL endpoint (start, status, stop from :func:`kappa.cli.services.service_app`)
and ``kappa serve user add``, the endpoint's password file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from kappa.cli.command import guarded
from kappa.cli.output import console
from kappa.cli.services import service_app
from kappa.config import load_settings
from kappa.core.guard import Guard, err_console, fail
from kappa.errors import KappaError
from kappa.services import serve as serve_service
from kappa.services.serve_users import DEFAULT_ITERATIONS

serve_app = service_app(serve_service.SERVICE, console, custom_start=True)


@serve_app.callback()
def serve_start(
    ctx: typer.Context,
    port: Optional[int] = typer.Option(None, "--port", help="HiveServer2 port (binary transport); default KAPPA_SERVE_PORT or 10000."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    timeout: float = typer.Option(300.0, help="Seconds to wait for the endpoint to answer."),
    auth: Optional[Path] = typer.Option(
        None, "--auth", metavar="PASSWORD_FILE",
        help="Only the users of this file log in (salted hashes written by `kappa serve user add`; "
             "HiveServer2 CUSTOM authentication). Default: KAPPA_SERVE_PASSWORD_FILE, else no password, "
             "which only a loopback --host allows."),
    tls_keystore: Optional[Path] = typer.Option(
        None, "--tls-keystore", metavar="PKCS12_FILE",
        help="Speak TLS (HiveServer2 SSL) with this PKCS12 keystore (the endpoint's key and certificate). "
             "Default: KAPPA_SERVE_TLS_KEYSTORE, else plain TCP."),
    tls_password_file: Optional[Path] = typer.Option(
        None, "--tls-password-file", metavar="FILE",
        help="The file holding the keystore's password. Default: KAPPA_SERVE_TLS_PASSWORD_FILE."),
) -> None:
    """Start the endpoint in the background: every promoted table under its stable name, kept in
    step with promotions and rollbacks (`kappa serve status`, `kappa serve stop`)."""
    if ctx.invoked_subcommand is not None:
        return
    from kappa.services import serve

    with Guard():
        with console.status("starting the Spark Thrift Server…"):
            tls = {k: v for k, v in (("serve_tls_keystore", tls_keystore),
                                     ("serve_tls_password_file", tls_password_file)) if v is not None}
            settings = load_settings(**tls)
            st = serve.start(settings, port=port or settings.serve_port, host=host, timeout_s=timeout,
                             password_file=auth)
        console.print(f"kappa serve up (pid {st.pid}): [bold]{st.jdbc_url}[/]; serving "
                      f"{', '.join(serve.served_names(st.tables)) or 'nothing promoted yet'}; log: {st.log_file}")
        login = (f"user and password from {st.password_file}" if st.auth == "CUSTOM" else "no password")
        console.print(f"connect: beeline -u {st.jdbc_url}   (any HiveServer2/JDBC/ODBC client, {login})")


serve_user_app = typer.Typer(help="The endpoint's password file (salted PBKDF2-SHA256 hashes).",
                             no_args_is_help=True)
serve_app.add_typer(serve_user_app, name="user")


@serve_user_app.command("add")
@guarded
def serve_user_add(
    name: str = typer.Argument(..., help="User name (no ':' or white space)."),
    file: Path = typer.Option(..., "--file", help="The password file (created with mode 0600 if missing)."),
    iterations: int = typer.Option(DEFAULT_ITERATIONS, "--iterations", help="PBKDF2 rounds (100,000 to 10,000,000)."),
    role: str = typer.Option("analyst", "--role", help="analyst (reads) or dbt (may also write the analytics schema)."),
) -> None:
    """Add NAME to the password file, or replace its line, with a salted hash of the password read
    from standard input (asked twice on a terminal; else the first line). Never from the command
    line, where other users of the machine could read it. A running endpoint applies it at the next login."""
    import getpass

    from kappa.services.serve_users import add_user, read_password_file

    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != password:
            fail("the two passwords differ; nothing written")
    else:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    try:
        replaced = add_user(file, name, password, iterations, role)
    except ValueError as err:
        fail(f"{err}; nothing written")
    console.print(f"{'replaced' if replaced else 'added'} {name} in {file}")
    try:
        read_password_file(file)
    except KappaError as err:  # e.g. another user's line is still plain text: re-add that user too
        err_console.print(f"[bold yellow]warning:[/] the endpoint refuses this file as it is: {err}",
                          highlight=False, soft_wrap=True)


