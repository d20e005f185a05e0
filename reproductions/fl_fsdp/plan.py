"""placeholder"""

from suite.plans import Plan


def plan(preset: str) -> Plan:
    return Plan("fl-fsdp", preset, [], protocol="equal tokens")
