"""A stand-in for ``agentgym_trl/engines/vllm_worker.py`` that needs no vLLM: the same command line, socket and
protocol, so the engine's process handling (start, errors, socket path, weight files, shutdown) is tested in a second.

``FAKE_VLLM_MODE``: ``serve`` (default) answers ``ping``, ``generate`` (the prompt's first tokens back),
``load_weights`` (reads the file after ``FAKE_VLLM_LOAD_DELAY`` seconds, then deletes it, as the real worker does)
and ``close``; ``crash`` writes a log with a traceback among unrelated lines and exits 1; ``oom`` writes a few lines
and is killed by SIGKILL, as the kernel's OOM killer does; ``FAKE_VLLM_KILL_AT=n`` (with ``serve``) is killed so at
its n-th ``generate``, after 40 unrelated log lines.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from multiprocessing.connection import Listener


def noise(count: int) -> None:
    for number in range(count):
        print(f"INFO 11-28 06:00:{number:02d} [core.py:{100 + number}] an unrelated vLLM log line {number}")


def main() -> None:
    """Start as the real worker does (parse its flags, listen on ``--address``), then behave as the mode says."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    args, _ = parser.parse_known_args()
    mode = os.environ.get("FAKE_VLLM_MODE", "serve")
    if mode == "crash":
        noise(5)
        print("Traceback (most recent call last):")
        print('  File "vllm/worker.py", line 12, in load_model')
        print("RuntimeError: the model's weights do not fit (a test's crash)")
        noise(40)
        sys.stdout.flush()
        sys.exit(1)
    if mode == "oom":
        noise(3)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(float(os.environ.get("FAKE_VLLM_START_DELAY", "0")))  # vLLM's start takes a while
    with Listener(args.address, family="AF_UNIX", authkey=os.environb[b"AGENTGYM_VLLM_AUTHKEY"]) as listener:
        print("fake worker ready", flush=True)
        with listener.accept() as connection:
            serve(connection)


def serve(connection) -> None:
    """Answer requests until ``close`` or the client goes away."""
    generated = 0
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        op = request.get("op")
        if op == "close":
            connection.send({"ok": True})
            return
        if op == "generate":
            generated += 1
            if generated == int(os.environ.get("FAKE_VLLM_KILL_AT", "0")):  # killed mid-run, as by the OOM killer
                noise(40)
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            outputs = [{"ids": ids[:limit], "logprobs": [0.0] * len(ids[:limit]), "finish": "length"}
                       for ids, limit in zip(request["prompts"], request["max_tokens"])]
            connection.send({"outputs": outputs})
        elif op == "load_weights":
            time.sleep(float(os.environ.get("FAKE_VLLM_LOAD_DELAY", "0")))
            try:
                with open(request["path"], "rb") as handle:
                    size = len(handle.read())
                os.unlink(request["path"])
            except OSError as error:
                connection.send({"error": f"{type(error).__name__}: {error}"})
                continue
            connection.send({"seconds": 0.0, "bytes": size})
        else:
            connection.send({"ok": True})


if __name__ == "__main__":
    main()
