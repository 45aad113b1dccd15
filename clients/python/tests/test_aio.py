"""The asyncio facade."""

from __future__ import annotations

import asyncio
import threading

import pytest

import hutch
from hutch.aio import AsyncClient


def test_async_facade(daemon) -> None:
    async def scenario() -> None:
        async with AsyncClient(daemon.socket) as client:
            assert (await client.health()).status == "ok"
            async with await client.create(labels={"suite": "aio"}) as sb:
                assert (await sb.exec("echo hi")).stdout == "hi\n"
                results = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(4)))
                assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
                stream = await sb.stream("echo a; echo b >&2")
                events = [(e.stream, e.data) async for e in stream]
                assert ("stdout", "a\n") in events and ("stderr", "b\n") in events
                assert stream.result is not None and stream.result.ok
                await sb.files.write_bytes("/x.bin", b"\x00\xff" * 10)
                blocks = [b async for b in sb.files.iter_bytes("/x.bin")]
                assert b"".join(blocks) == b"\x00\xff" * 10
                proc = await sb.spawn("echo bg")
                chunks = [c.data async for c in proc.follow()]
                assert b"".join(chunks) == b"bg\n"
                assert (await proc.wait()).exit_code == 0
                listed = await client.list({"suite": "aio"})
                assert [s.id for s in listed] == [sb.id]
                with pytest.raises(hutch.CommandError):
                    await sb.exec("exit 1", check=True)
                sandbox_id = sb.id
            with pytest.raises(hutch.SandboxNotFound):
                await client.get(sandbox_id)

    asyncio.run(scenario())


def test_async_streams_run_on_the_event_loop(daemon) -> None:
    async def scenario() -> None:
        async with AsyncClient(daemon.socket) as client:
            async with await client.create() as sb:
                threads_before = threading.active_count()

                async def one(i: int) -> str:
                    stream = await sb.stream(f"sleep 0.5; echo {i}")
                    out = "".join([e.data async for e in stream])
                    assert stream.result is not None and stream.result.exit_code == 0
                    return out

                outputs = await asyncio.gather(*(one(i) for i in range(8)))
                assert outputs == [f"{i}\n" for i in range(8)]
                # Eight commands streamed at once without a thread each.
                assert threading.active_count() <= threads_before + 1
                async with await sb.stream("while true; do echo tick; sleep 0.05; done") as s:
                    async for event in s:
                        assert event.data.startswith("tick")
                        break
                for _ in range(100):
                    check = await sb.exec("pgrep -f '[e]cho tick' || echo none")
                    if check.stdout == "none\n":
                        break
                    await asyncio.sleep(0.1)
                else:
                    pytest.fail("the command outlived its closed async stream")
                await sb.pause()
                with pytest.raises(hutch.SandboxPaused) as caught:
                    await sb.stream("true")
                assert caught.value.request_id
                await sb.resume()

    asyncio.run(scenario())


def test_async_sessions_and_watch(daemon) -> None:
    async def scenario() -> None:
        async with AsyncClient(daemon.socket) as client:
            async with await client.create(labels={"suite": "aio"}) as sb:
                session = await sb.session("a")
                assert session.name == "a"
                await session.exec("cd /tmp && export X=7", check=True)
                assert (await session.exec('echo "$PWD $X"')).stdout == "/tmp 7\n"
                await sb.files.mkdir("/tmp/aw")
                events = sb.watch("/tmp/aw")
                write = asyncio.create_task(sb.exec("sleep 0.2; touch /tmp/aw/f", check=True))
                first = await asyncio.wait_for(events.__anext__(), 20)
                await events.aclose()
                await write
                assert (first.event, first.path) == ("create", "/tmp/aw/f")
                await session.delete()
                assert await sb.sessions() == []

    asyncio.run(scenario())
