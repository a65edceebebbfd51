# PyInstaller runtime hook (decoding-lab.spec's runtime_hooks): runs before main.py, so what the
# process must do before torch loads (engine.runtime.launch.prepare: the machine's load at the
# start, for the adaptive thread count) happens first in the packaged build too; main.py calls
# it again, which does nothing the second time.
from engine.runtime.launch import prepare

prepare()
