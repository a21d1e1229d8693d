/** The fencing gateway (data plane). */
export { createGateway, type GatewayOptions } from './gateway-server.js';
export type { StoreGuardOptions } from './store-guard.js';
