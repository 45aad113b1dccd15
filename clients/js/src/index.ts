export { HutchClient } from "./client.js";
export { CommandExitError, HutchError } from "./errors.js";
export { Process, Pty, Sandbox, Session } from "./sandbox.js";
export type { Command } from "./sandbox.js";
export type { Body, ClientOptions } from "./transport.js";
export type { PortForward } from "./tunnel.js";
export * from "./types.js";
