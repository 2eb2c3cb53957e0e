"""The local broker's JVM runs with the JIT options it is given (``kappa.core.jvm.JIT_OPTIONS``:
C1 only, for a service that starts often and spends its CPU on requests and file I/O)."""

from __future__ import annotations

import os
import subprocess

from kappa.core.jvm import java_executable
from kappa.kafka import broker


def test_the_local_broker_compiles_with_c1_only(broker_settings):
    pid = broker.running_pid(broker_settings)
    assert pid is not None
    jcmd = os.path.join(os.path.dirname(os.path.realpath(java_executable())), "jcmd")
    # the running VM's flags, as it applied them (not the command line that asked for them)
    flags = subprocess.run([jcmd, str(pid), "VM.flags"], capture_output=True, text=True, timeout=60,
                           check=True).stdout.split()
    assert "-XX:TieredStopAtLevel=1" in flags
    assert "-XX:ReservedCodeCacheSize=251658240" in flags
