// The budget of registry reads for unknown names (a Host no cache knows: the front asks the
// registry for a `<slug>.{domain}` placed on another host a moment ago, before its NOTIFY
// arrived). Customer domains never get here: every host holds the cluster's whole domain map.
// The budget itself is shared with the SSH server and the HTTP-01 responder (src/misses.ts).

export { MissBudget, NEGATIVE_MS, SOURCE_BURST, SOURCE_RATE, HOST_BURST, HOST_RATE } from '../misses.js';
