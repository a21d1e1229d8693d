export { decodeSequencer, signSequencer, MAX_SEQUENCER_LENGTH, type SequencerClaims } from './format.js';
export { SequencerIssuer } from './issuer.js';
export { KeyRing, type Jwk, type SigningKey } from './keyring.js';
export * from './keys.js';
export {
  SequencerVerifier,
  storeAudience,
  type SequencerAudience,
  type SequencerVerdict,
} from './verifier.js';
