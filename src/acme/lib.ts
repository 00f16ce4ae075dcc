// The parts of acme-client order.ts uses, in a module of their own so that order.ts loads it (and
// acme-client with axios) on the first order, by import(), rather than with the daemon. A plain
// ESM re-export: the bundler gives the importer named exports of this CommonJS package as Node does.
export { axios, Client, crypto } from 'acme-client';
