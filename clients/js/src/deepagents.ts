// A Deep Agents backend (the JS `deepagents` package, >= 1.7.2) served by hutchd's native routes:
// execute runs through /exec, and ls/read/readRaw/grep/glob/write/edit/delete through /fs/* and
// /files instead of the shell scripts BaseSandbox would run inside, so the sandbox needs no
// find/awk/grep and a file is never misread by a script's exit code. Lifecycle as
// @langchain/daytona: a constructor without I/O, initialize(), static create(), static fromId(),
// close().
import {
  BaseSandbox,
  type DeleteResult, type EditResult, type ExecuteResponse, type FileDownloadResponse,
  type FileInfo, type FileOperationError, type FileUploadResponse, type GlobResult, type GrepResult,
  type LsResult, type ReadRawResult, type ReadResult, type WriteResult,
} from "deepagents";
import { HutchClient } from "./client.js";
import { HutchError } from "./errors.js";
import type { Sandbox } from "./sandbox.js";
import type { ClientOptions } from "./transport.js";
import type { CreateOptions } from "./types.js";

// The extensions deepagents reads as binary (its getMimeType/isTextMimeType, not exported): their
// content comes back as bytes, exact, and writes of them are base64.
const kBinaryTypes: Record<string, string> = {
  ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
  ".webp": "image/webp", ".heic": "image/heic", ".heif": "image/heif", ".mp3": "audio/mpeg",
  ".wav": "audio/wav", ".aiff": "audio/aiff", ".aac": "audio/aac", ".ogg": "audio/ogg",
  ".flac": "audio/flac", ".mp4": "video/mp4", ".webm": "video/webm", ".mpeg": "video/mpeg",
  ".mov": "video/quicktime", ".avi": "video/x-msvideo", ".flv": "video/x-flv", ".mpg": "video/mpeg",
  ".wmv": "video/x-ms-wmv", ".3gpp": "video/3gpp", ".pdf": "application/pdf",
  ".ppt": "application/vnd.ms-powerpoint",
  ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
};

function binaryType(path: string): string | undefined {
  const slash = path.lastIndexOf("/");
  const dot = path.lastIndexOf(".");
  if (dot <= slash + 1) return undefined;
  return kBinaryTypes[path.slice(dot).toLowerCase()];
}

const kFileErrors = new Set<FileOperationError>(["file_not_found", "permission_denied", "is_directory", "invalid_path"]);

function fileError(code: string | undefined): FileOperationError {
  return kFileErrors.has(code as FileOperationError) ? (code as FileOperationError) : "invalid_path";
}

function codeOf(error: unknown): string | undefined {
  return error instanceof HutchError ? error.code : undefined;
}

export interface HutchSandboxOptions {
  /** An existing client (default: one from HUTCH_SOCKET / HUTCH_URL / HUTCH_TOKEN). */
  client?: HutchClient;
  clientOptions?: ClientOptions;
  /** How the sandbox is created by initialize() (ignored by fromId). */
  create?: CreateOptions;
  /** Seconds per execute when none is given (default: the sandbox's default_timeout_seconds). */
  defaultTimeoutSeconds?: number;
  /** Delete the sandbox on close() (default true for created ones, false for fromId). */
  deleteOnClose?: boolean;
}

export class HutchSandbox extends BaseSandbox {
  private readonly client: HutchClient;
  private readonly options: HutchSandboxOptions;
  private sandbox_?: Sandbox;
  private deleteOnClose: boolean;

  constructor(options: HutchSandboxOptions = {}) {
    super();
    this.options = options;
    this.client = options.client ?? new HutchClient(options.clientOptions);
    this.deleteOnClose = options.deleteOnClose ?? true;
  }

  /** Creates a sandbox and initializes the backend on it. */
  static async create(options: HutchSandboxOptions = {}): Promise<HutchSandbox> {
    const backend = new HutchSandbox(options);
    await backend.initialize();
    return backend;
  }

  /** A backend on an existing sandbox (close() leaves it unless deleteOnClose). */
  static async fromId(id: string, options: HutchSandboxOptions = {}): Promise<HutchSandbox> {
    const backend = new HutchSandbox({ deleteOnClose: false, ...options });
    backend.sandbox_ = await backend.client.get(id);
    return backend;
  }

  async initialize(): Promise<void> {
    if (this.sandbox_ === undefined) this.sandbox_ = await this.client.create(this.options.create);
  }

  get isInitialized(): boolean {
    return this.sandbox_ !== undefined;
  }

  /** The hutch sandbox: its whole client API (background processes, snapshots, ...). */
  get sandbox(): Sandbox {
    if (this.sandbox_ === undefined) throw new Error("HutchSandbox is not initialized: await initialize() or use HutchSandbox.create()");
    return this.sandbox_;
  }

  get id(): string {
    return this.sandbox.id;
  }

  async close(): Promise<void> {
    const sandbox = this.sandbox_;
    this.sandbox_ = undefined;
    if (sandbox !== undefined && this.deleteOnClose) await sandbox.delete();
    this.deleteOnClose = this.options.deleteOnClose ?? true;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * `sh -c command`; output is stdout and stderr in the order they were written, exactly as the
   * command wrote them, and exitCode the real status (null only when it timed out).
   */
  async execute(command: string, options: { timeout?: number } = {}): Promise<ExecuteResponse> {
    let output = "";
    let exitCode: number | null = null;
    let truncated = false;
    const timeoutSeconds = options.timeout ?? this.options.defaultTimeoutSeconds;
    for await (const event of this.sandbox.execStream(command, timeoutSeconds !== undefined ? { timeoutSeconds } : {})) {
      if (event.type === "exit") {
        exitCode = event.result.timedOut ? null : event.result.exitCode;
        truncated = event.result.truncated;
      } else {
        output += event.data;
      }
    }
    return { output, exitCode, truncated };
  }

  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    const results = await this.sandbox.upload(files);
    return results.map((result) => ({ path: result.path, error: result.error === undefined ? null : fileError(result.error) }));
  }

  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    const results = await this.sandbox.download(paths);
    return results.map((result) => result.error === undefined
      ? { path: result.path, content: result.content ?? new Uint8Array(), error: null }
      : { path: result.path, content: null, error: fileError(result.error) });
  }

  async ls(path: string): Promise<LsResult> {
    try {
      const entries = await this.sandbox.ls(path);
      const files: FileInfo[] = entries.map((entry) => ({
        path: entry.isDir ? `${entry.path}/` : entry.path,
        is_dir: entry.isDir,
        size: entry.size,
        modified_at: entry.modifiedAt,
      }));
      return { files };
    } catch (error) {
      if (codeOf(error) === "file_not_found") return { files: [] };
      return { error: `Error listing '${path}': ${(error as Error).message}` };
    }
  }

  async read(filePath: string, offset = 0, limit = 500): Promise<ReadResult> {
    const binary = binaryType(filePath);
    try {
      if (binary !== undefined) {
        return { content: new Uint8Array(await this.sandbox.readBytes(filePath)), mimeType: binary };
      }
      const start = Number.isFinite(offset) ? Math.max(0, Math.floor(offset)) : 0;
      const count = Number.isFinite(limit) ? Math.max(0, Math.floor(limit)) : 0;
      if (count === 0) return { content: "", mimeType: "text/plain" };
      const lines = await this.sandbox.readLines(filePath, start, count);
      if (start >= lines.totalLines || lines.endLine <= start) return { content: lines.content, mimeType: "text/plain" };
      return {
        content: lines.content,
        mimeType: "text/plain",
        totalLines: lines.totalLines,
        startLine: start + 1,
        endLine: lines.endLine,
        ...(lines.nextOffset !== null ? { nextOffset: lines.nextOffset } : {}),
      };
    } catch (error) {
      if (codeOf(error) === "file_not_found" || codeOf(error) === "is_directory") return { error: `File '${filePath}' not found` };
      return { error: `Error reading '${filePath}': ${(error as Error).message}` };
    }
  }

  async readRaw(filePath: string): Promise<ReadRawResult> {
    try {
      const bytes = await this.sandbox.readBytes(filePath);
      const now = new Date().toISOString();
      const binary = binaryType(filePath);
      return {
        data: {
          content: binary !== undefined ? new Uint8Array(bytes) : bytes.toString("utf8"),
          mimeType: binary ?? "text/plain",
          created_at: now,
          modified_at: now,
        },
      };
    } catch (error) {
      if (codeOf(error) === "file_not_found" || codeOf(error) === "is_directory") return { error: `File '${filePath}' not found` };
      return { error: `Error reading '${filePath}': ${(error as Error).message}` };
    }
  }

  async grep(pattern: string, path = "/", glob: string | null = null, maxCount: number | null = null): Promise<GrepResult> {
    try {
      const found = await this.sandbox.grep(pattern, {
        path,
        ...(glob !== null ? { glob } : {}),
        ...(maxCount !== null ? { maxCount } : {}),
      });
      const matches = found.matches.filter((match) => binaryType(match.path) === undefined);
      return { matches, ...(found.truncated ? { truncated: true } : {}) };
    } catch (error) {
      if (codeOf(error) === "file_not_found") return { matches: [] };
      return { error: `Error searching '${path}': ${(error as Error).message}` };
    }
  }

  async glob(pattern: string, path = "/"): Promise<GlobResult> {
    try {
      const paths = await this.sandbox.glob(pattern, path);
      return { files: paths.map((found) => ({ path: found, is_dir: false })) };
    } catch (error) {
      if (codeOf(error) === "file_not_found") return { files: [] };
      return { error: `Error in glob '${pattern}' under '${path}': ${(error as Error).message}` };
    }
  }

  async write(filePath: string, content: string): Promise<WriteResult> {
    try {
      if (binaryType(filePath) !== undefined) await this.sandbox.writeFile(filePath, Buffer.from(content, "base64"));
      else await this.sandbox.write(filePath, content);
      return { path: filePath, filesUpdate: null };
    } catch (error) {
      return { error: `Failed to write to ${filePath}: ${codeOf(error) ?? (error as Error).message}` };
    }
  }

  async edit(filePath: string, oldString: string, newString: string, replaceAll = false): Promise<EditResult> {
    // An empty oldString may only fill an empty file: BaseSandbox's rule, kept as it is.
    if (oldString.length === 0) return super.edit(filePath, oldString, newString, replaceAll);
    try {
      const occurrences = await this.sandbox.edit(filePath, oldString, newString, { replaceAll });
      return { path: filePath, filesUpdate: null, occurrences };
    } catch (error) {
      switch (codeOf(error)) {
        case "file_not_found":
          return { error: `Error: File '${filePath}' not found` };
        case "no_match":
          return { error: `String not found in file '${filePath}'` };
        case "not_unique":
          return { error: `Multiple occurrences found in '${filePath}'. Use replaceAll=true to replace all.` };
        default:
          return { error: `Failed to edit '${filePath}': ${(error as Error).message}` };
      }
    }
  }

  async delete(filePath: string): Promise<DeleteResult> {
    try {
      await this.sandbox.deletePath(filePath);
      return { path: filePath, filesUpdate: null };
    } catch (error) {
      if (codeOf(error) === "file_not_found") return { error: `Error: '${filePath}' not found` };
      return { error: `Error deleting file '${filePath}': ${(error as Error).message}` };
    }
  }
}
