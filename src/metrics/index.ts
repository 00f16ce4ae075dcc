// Public surface of the metrics module: the recording calls every module may make (they never
// throw and cost O(1)), the scrape-time sources, the separate listener and the README reference.
export { metrics, metricsReference, setScrapeSources, type ScrapeSources } from './registry.js';
export { startMetrics, serveMetrics, parseListen, type MetricsListener } from './listener.js';
