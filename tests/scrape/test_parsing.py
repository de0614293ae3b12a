"""ParserPool: small bodies on the loop, large ones in a worker process, with the same results and errors."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from monitor.config import SidecarSettings
from monitor.parse.exposition import LimitExceeded, Limits, ParseError, parse
from monitor.parse.families import engine_wanted
from monitor.scrape.parsing import ParserDied, ParserPool
from tests.conftest import REAL_TEXT

W = engine_wanted()


def run_pool(inline_max: int, jobs, process_min: int = 0):
    """Run `jobs(pool)` (a coroutine function) against a pool that parses bodies above `inline_max` in a
    thread, and from `process_min` on in a worker process."""
    pool = ParserPool(SidecarSettings(parse_inline_max_bytes=inline_max, parse_process_min_bytes=process_min,
                                      parse_workers=1))

    async def go():
        try:
            return await jobs(pool)
        finally:
            pool.close()

    return asyncio.run(go()), pool


def test_a_worker_process_or_the_thread_gives_the_same_exposition_as_parsing_in_place():
    body = REAL_TEXT.read_bytes()

    async def jobs(pool):
        return await pool.parse(body, W, content_type="", count_families=False, limits=Limits())

    here = parse(body, W, count_families=False)
    got, pool = run_pool(0, jobs)
    assert (pool.offloaded, pool.threaded) == (1, 0) and got == here
    got, pool = run_pool(0, jobs, process_min=len(body) + 1)  # a lone body: parsed on the loop
    assert (pool.offloaded, pool.threaded, pool.lone) == (0, 0, 1) and got == here

    async def burst(pool):  # one deployment's targets answering together: the first on the loop, the rest beside it
        return await asyncio.gather(*(jobs(pool) for _ in range(3)))

    got, pool = run_pool(0, burst, process_min=len(body) + 1)
    assert (pool.offloaded, pool.threaded, pool.lone) == (0, 2, 1) and got == [here] * 3
    got, pool = run_pool(len(body), jobs)
    assert (pool.offloaded, pool.threaded) == (0, 0) and got == here


def test_errors_in_a_worker_arrive_as_the_same_errors():
    bad = REAL_TEXT.read_bytes().replace(b"sglang:num_running_reqs{", b"sglang:num_running_reqs{=", 1)

    async def parse_error(pool):
        return await pool.parse(bad, W, content_type="", count_families=False, limits=Limits())

    async def limit(pool):
        return await pool.parse(REAL_TEXT.read_bytes(), W, content_type="", count_families=False,
                                limits=Limits(samples=10))

    with pytest.raises(ParseError) as here:
        parse(bad, W, count_families=False)
    with pytest.raises(ParseError) as there:
        run_pool(0, parse_error)
    assert str(there.value) == str(here.value) and there.value.line == here.value.line
    with pytest.raises(LimitExceeded, match="sample limit exceeded: more than 10 samples"):
        run_pool(0, limit)


def test_a_worker_that_dies_fails_that_scrape_with_the_reason_and_the_next_one_gets_a_new_worker():
    line = 'x{idx="%d"} 1\n'
    slow = "".join(line % i for i in range(2_000_000)).encode()  # seconds of parsing: time to kill it

    async def jobs(pool):
        job = asyncio.create_task(pool.parse(slow, W, content_type="", count_families=False, limits=Limits()))
        while not pool._processes or not pool._processes._processes:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        for pid in list(pool._processes._processes):
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(ParserDied, match="worker process died"):
            await job
        return await pool.parse(REAL_TEXT.read_bytes(), W, content_type="", count_families=False, limits=Limits())

    got, pool = run_pool(0, jobs)
    assert got.samples == 545 and pool.offloaded == 2
