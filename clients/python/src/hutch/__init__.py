"""Python client of hutchd (docs/api.md): sandboxes, exec, background processes, files, layers.

    import hutch
    with hutch.Client() as client, client.create() as sandbox:
        print(sandbox.exec("echo hi").stdout)
"""

from hutch._tunnel import PortForward
from hutch.client import (Client, ExecStream, Files, Process, Pty, Recipes, Sandbox, Session,
                          WatchStream)
from hutch.errors import (AlreadyExists, BadGateway, BadRequest, BakeFailed, CheckpointNotFound,
                          CommandError, Conflict, FileNotFound, HutchConnectionError, HutchError,
                          InsufficientStorage, InvalidPath, IsDirectory, NoMatch, NotADirectory,
                          NotEmpty, NotFound, NotUnique, PayloadTooLarge, PermissionDenied,
                          PortUnreachable, ProcessNotFound, ProtocolError, RecipeNotFound,
                          SandboxNotFound, SandboxPaused, ServerError, TooManyRequests,
                          Unauthorized, Unavailable, Unprocessable, VolumeBusy, VolumeExists,
                          VolumeNotFound)
from hutch.models import (BakeResult, Checkpoint, ExecResult, FileEntry, FileResult, GrepMatch,
                          GrepResult, Health, NetworkState, OutputChunk, OutputEvent, Pool,
                          PortToken, ProcessStatus, Recipe, SandboxInfo, SecretInfo, SnapshotResult,
                          TextWindow, Volume, VolumeAttachment, WatchEvent)

__version__ = "0.1.0"

__all__ = [
    "Client", "Sandbox", "Process", "Pty", "Files", "Recipes", "ExecStream", "Session",
    "WatchStream", "PortForward",
    "HutchError", "HutchConnectionError", "ProtocolError", "BadRequest", "InvalidPath",
    "Unauthorized", "PermissionDenied", "NotFound", "SandboxNotFound", "ProcessNotFound",
    "FileNotFound", "RecipeNotFound", "CheckpointNotFound", "Conflict", "SandboxPaused",
    "AlreadyExists", "IsDirectory", "NotADirectory", "NotEmpty", "PayloadTooLarge",
    "Unprocessable", "NoMatch", "NotUnique", "BakeFailed", "TooManyRequests", "ServerError",
    "Unavailable", "InsufficientStorage", "CommandError", "VolumeNotFound", "VolumeBusy",
    "VolumeExists", "BadGateway", "PortUnreachable",
    "SandboxInfo", "ExecResult", "OutputEvent", "ProcessStatus", "OutputChunk", "FileEntry",
    "TextWindow", "GrepMatch", "GrepResult", "FileResult", "Recipe", "BakeResult",
    "SnapshotResult", "Checkpoint", "Health", "Pool", "WatchEvent", "NetworkState", "SecretInfo",
    "PortToken", "Volume", "VolumeAttachment",
]
