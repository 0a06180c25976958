"""Test-suite settings shared by every folder."""

from hypothesis import settings

# Property tests draw the same examples on every run (CI included), so a failure reproduces, and no
# example fails for taking longer than a deadline on a loaded 2-core machine.
settings.register_profile("designer", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("designer")
