// One error family: what hutchd answered (its stable code, the HTTP status, the request id), and
// a command that exited non-zero when the caller asked for `check: true`.
import type { ExecResult } from "./types.js";

export class HutchError extends Error {
  /** hutchd's stable error code, e.g. "sandbox_not_found" (docs/api.md), or "http_error". */
  readonly code: string;
  readonly status: number;
  readonly requestId?: string;
  /** The whole error object hutchd sent (a failed bake also carries its `log`). */
  readonly details: Record<string, unknown>;

  constructor(code: string, status: number, message: string, requestId?: string, details: Record<string, unknown> = {}) {
    super(`${code} (HTTP ${status}${requestId ? `, request ${requestId}` : ""}): ${message}`);
    this.name = "HutchError";
    this.code = code;
    this.status = status;
    this.requestId = requestId;
    this.details = details;
  }

  static fromResponse(status: number, body: string, requestId?: string): HutchError {
    try {
      const parsed = JSON.parse(body) as { error?: Record<string, unknown> };
      const error = parsed.error;
      if (error && typeof error.code === "string") {
        return new HutchError(error.code, status, String(error.message ?? ""), requestId, error);
      }
    } catch {
      // not JSON: reported as the raw body below
    }
    return new HutchError("http_error", status, body.slice(0, 500), requestId);
  }
}

/** `exec(..., { check: true })` of a command that did not exit 0. */
export class CommandExitError extends Error {
  readonly result: ExecResult;
  constructor(result: ExecResult) {
    super(`command exited ${result.exitCode}${result.timedOut ? " (timed out)" : ""}: ${result.stderr.slice(0, 500)}`);
    this.name = "CommandExitError";
    this.result = result;
  }
}
