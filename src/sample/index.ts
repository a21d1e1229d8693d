/** The sample upstream service fencegate can run for its demo. */
export { startSampleUpstream, type SampleUpstream, type SampleUpstreamOptions } from './sample-upstream.js';
export { OrderBook, type AppliedWrite, type Order } from './orders.js';
