// Pages for people: the HTML that browsers get at the same URLs where agents get JSON — the apex
// landing page, the recharge page, a server's welcome and error pages — built from escaped
// fragments (html.ts) in one shared frame (layout.ts); content negotiation on Accept
// (negotiate.ts); absolute URLs as clients reach this daemon (urls.ts).
export { markup, esc, trusted, Html } from './html.js';
export { pageReply, type PageSpec } from './layout.js';
export { prefersHtml, wantsHtml } from './negotiate.js';
export { PublicUrls, type PublicSettings } from './urls.js';
export { landingInfo, landingReply, type LandingFacts } from './landing.js';
export { rechargeReply, type RechargeFacts } from './recharge.js';
export { verifyHomeReply, type VerifyHomeFacts } from './verifyhome.js';
export { welcomeReply, errorPageReply, type SiteLinks, type ErrorFacts } from './site.js';
