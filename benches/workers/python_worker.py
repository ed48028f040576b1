"""The Python worker of `cargo bench --bench http` (part `python-workers`):
one process, the SDK in sdk/python, serving `quick_py`, whose handler
returns at once. The bench starts it with the venv that `sdk/python/test.sh`
makes (`.cache/workers/venv`).

    python benches/workers/python_worker.py --url ws://127.0.0.1:PORT/workers --token TOKEN
"""

import argparse
import asyncio

from subtask_worker import Context, Worker


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--capacity", type=int, default=256)
    a = p.parse_args()
    worker = Worker(a.url, token=a.token, name="bench-python", capacity=a.capacity)

    @worker.tool("quick_py", description="A worker task that completes at once.", resumable=False,
                 task_support="required")
    async def quick(ctx: Context, args: dict) -> str:
        return "ok"

    run = asyncio.create_task(worker.run())
    await worker.wait_ready()
    print("ready", flush=True)
    await run


if __name__ == "__main__":
    asyncio.run(main())
