"""SCRAM credentials in the metadata log (KRaft's ScramControlManager), pure: the broker
salts the password and derives StoredKey/ServerKey (AlterUserScramCredentials carries only
the salted password), the controller validates the changes and writes the records.

Kafka's rules: all changes of one user apply or none do; a user named twice for one
mechanism gets DUPLICATE_RESOURCE; an empty user or out-of-range iteration count
UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; deleting a
credential that does not exist RESOURCE_NOT_FOUND."""

from __future__ import annotations

from common.errors import ErrorCode
from metadata import records as r
from metadata.controller_api import ScramChange
from metadata.image import MetadataImage

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


def alter_user_scram_credentials(image: MetadataImage, changes: list[ScramChange]
                                 ) -> tuple[list, list[tuple[str, int, str | None]]]:
    """Returns (records, [(user, error code, message)]) with one result per user, in order."""
    by_user: dict[str, list[ScramChange]] = {}
    for c in changes:
        by_user.setdefault(c.user, []).append(c)
    records, results = [], []
    for user, items in by_user.items():
        error = _check(image, user, items)
        if error is not None:
            results.append((user, *error))
            continue
        for c in items:
            if c.delete:
                records.append(r.RemoveUserScramCredentialRecord(user, c.mechanism))
            else:
                records.append(r.UserScramCredentialRecord(user, c.mechanism, c.salt, c.stored_key, c.server_key,
                                                           c.iterations))
        results.append((user, ErrorCode.NONE, None))
    return records, results


def _check(image: MetadataImage, user: str, items: list[ScramChange]) -> tuple[int, str] | None:
    if not user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    seen = set()
    for c in items:
        if c.mechanism in seen:
            return ErrorCode.DUPLICATE_RESOURCE, f"A user credential cannot be altered twice in the same request " \
                                                 f"({c.mechanism})"
        seen.add(c.mechanism)
        if c.mechanism not in MECHANISMS:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {c.mechanism!r}"
        if c.delete:
            if (user, c.mechanism) not in image.scram_credentials:
                return ErrorCode.RESOURCE_NOT_FOUND, f"Attempt to delete a user credential that does not exist " \
                                                     f"({c.mechanism})"
            continue
        if not MIN_ITERATIONS <= c.iterations <= MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, (f"Iterations {c.iterations} must be between "
                                                       f"{MIN_ITERATIONS} and {MAX_ITERATIONS}")
        if not c.salt or not c.stored_key or not c.server_key:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Credential must have a salt and a salted password"
    return None
