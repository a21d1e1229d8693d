/**
 * Measurement hook for bench/memory.mjs, never loaded by fencegate itself: the bench starts
 * the gateway with `node --import bench/mem-probe.mjs …`, and on SIGUSR2 this writes the
 * process's own view of its memory (process.memoryUsage() and V8's heap spaces) as one
 * JSON line to the file named by FG_MEM_PROBE.
 */
import { appendFileSync } from 'node:fs';
import v8 from 'node:v8';

const file = process.env.FG_MEM_PROBE;
if (file) {
  process.on('SIGUSR2', () => {
    const spaces = {};
    for (const s of v8.getHeapSpaceStatistics()) {
      spaces[s.space_name] = { size: s.space_size, used: s.space_used_size, physical: s.physical_space_size };
    }
    const heap = v8.getHeapStatistics();
    appendFileSync(
      file,
      `${JSON.stringify({ at: Date.now(), usage: process.memoryUsage(), spaces, mallocedMemory: heap.malloced_memory, peakMallocedMemory: heap.peak_malloced_memory, externalMemory: heap.external_memory })}\n`,
    );
  });
}
