"""Run the official Kyutai client (`python -m moshi.client` of the PyPI
package `moshi`, 0.2.13) unchanged, headless, against a port:

    python official_client.py PORT SECONDS

`moshi`'s package __init__ imports its models (torch); the client needs
none of them, so the package is installed without its dependencies
(tests/tests.mk) and its client module is loaded under an empty `moshi`
package whose search path is the installed one: client.py and
client_utils.py run as shipped. `sounddevice` is replaced by a stand-in:
its InputStream calls the client's callback with 80 ms blocks of speech at
real time (the microphone), its OutputStream pulls 80 ms blocks at real
time (the speaker) and counts those that held sound. The client ends when
the server closes the session (the test sets limits.max_steps); then this
prints `speaker_blocks N` on stdout, after the client's own output (its
text tokens: RawPrinter)."""
import importlib.util
import os
import sys
import threading
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class _Stream:
    """What the client uses of sounddevice's streams: a context manager
    that calls callback(data, frames, time, status) every block."""

    def __init__(self, samplerate, channels, blocksize, callback, fill):
        self.rate, self.ch, self.n, self.cb, self.fill = samplerate, channels, blocksize, callback, fill
        self._stop = threading.Event()

    def _run(self):
        period, t = self.n / self.rate, time.monotonic()
        while not self._stop.is_set():
            self.fill(self)
            t += period
            self._stop.wait(max(0.0, t - time.monotonic()))

    def __enter__(self):
        self._th = threading.Thread(target=self._run, daemon=True)
        self._th.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._th.join(timeout=5)


SPEECH = None
spoken = [0]
heard = [0]


def _mic(s):
    block = np.zeros((s.n, s.ch), dtype=np.float32)
    i = spoken[0] % (len(SPEECH) - s.n)
    block[:, 0] = SPEECH[i:i + s.n]
    spoken[0] += s.n
    s.cb(block, s.n, None, None)


def _speaker(s):
    out = np.zeros((s.n, s.ch), dtype=np.float32)
    s.cb(out, s.n, None, None)
    if np.abs(out).max() > 0:
        heard[0] += 1


def main():
    global SPEECH
    port, seconds = sys.argv[1], float(sys.argv[2])
    import moshi_client as mc  # the tests' speech (espeak-ng)
    SPEECH = mc.speech_pcm("Hello from the official client, running as it ships.", seconds=seconds)
    sd = types.ModuleType("sounddevice")
    sd.InputStream = lambda samplerate, channels, blocksize, callback: _Stream(samplerate, channels, blocksize,
                                                                                callback, _mic)
    sd.OutputStream = lambda samplerate, channels, blocksize, callback: _Stream(samplerate, channels, blocksize,
                                                                                 callback, _speaker)
    sys.modules["sounddevice"] = sd
    spec = importlib.util.find_spec("moshi")
    pkg = types.ModuleType("moshi")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["moshi"] = pkg
    import moshi.client as client  # client.py and client_utils.py as shipped
    sys.argv = ["moshi.client", "--host", "127.0.0.1", "--port", port]
    client.main()
    sys.stdout.flush()
    print(f"\nspeaker_blocks {heard[0]}")


if __name__ == "__main__":
    main()
