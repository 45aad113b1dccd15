"""The asyncio facade."""

from __future__ import annotations

import asyncio

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
