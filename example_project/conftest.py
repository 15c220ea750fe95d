"""Project-wide test configuration of the example: nothing is needed for pytest-autotune itself
(the plugin registers through its entry point); this shows the one hook a team may want."""


def pytest_autotune_lockfile_name(config, device):
    """Keep the default: one lockfile per device model (``autotune.lock/<slug>.json``)."""
    return None
