/**
 * Embedded store: the unfenced route and fenced writes on one process, then the same fenced
 * writes with the command's other heap, the larger one (FENCEGATE_HEAP=fast, ADR 0004,
 * addendum 5), each process with its resident memory at idle and after its rows.
 */
import { join } from 'node:path';
import { acquireTokens, fencegate, rssKiB, run, sleep, stop, summarize, WARMUP } from '../core.mjs';

export default {
  name: 'embedded',
  groups: ['embedded'],
  async run(ctx) {
    const { r, say, cpuOf, withRss } = ctx;
    const embedded = await fencegate(join(ctx.tmp, 'embedded'), ctx.policyDir);
    await sleep(1000);
    r.embeddedIdleKiB = await rssKiB(embedded.child.pid);
    say(`fencegate unfenced route …`);
    await run(embedded.data, { base: 'open', seconds: WARMUP });
    r.unfencedResult = await withRss(
      summarize(
        'fencegate, unfenced route',
        await cpuOf(embedded.child.pid, null, { run: () => run(embedded.data, { base: 'open' }) }),
      ),
      embedded.child.pid,
    );
    say(`fencegate fenced, embedded …`);
    const tokens = await acquireTokens(embedded.control, 'order');
    await run(embedded.data, { tokens, seconds: WARMUP });
    r.embeddedResult = await withRss(
      summarize(
        'fencegate fenced, embedded store',
        await cpuOf(embedded.child.pid, null, { run: () => run(embedded.data, { tokens }) }),
      ),
      embedded.child.pid,
    );
    r.embeddedLoadKiB = await rssKiB(embedded.child.pid);
    await stop(embedded.child);

    // The same store and writes with the command's other heap, the larger one (ADR 0004, addendum 5).
    say(`fencegate fenced, embedded, FENCEGATE_HEAP=fast …`);
    const fastHeap = await fencegate(join(ctx.tmp, 'embedded-fast-heap'), ctx.policyDir, [], {
      FENCEGATE_HEAP: 'fast',
    });
    await sleep(1000);
    r.fastHeapIdleKiB = await rssKiB(fastHeap.child.pid);
    const fastHeapTokens = await acquireTokens(fastHeap.control, 'order');
    await run(fastHeap.data, { tokens: fastHeapTokens, seconds: WARMUP });
    r.fastHeapResult = await withRss(
      summarize(
        'fencegate fenced, embedded store, FENCEGATE_HEAP=fast',
        await cpuOf(fastHeap.child.pid, null, { run: () => run(fastHeap.data, { tokens: fastHeapTokens }) }),
      ),
      fastHeap.child.pid,
    );
    r.fastHeapLoadKiB = await rssKiB(fastHeap.child.pid);
    await stop(fastHeap.child);
    return [r.unfencedResult, r.embeddedResult, r.fastHeapResult];
  },
};
