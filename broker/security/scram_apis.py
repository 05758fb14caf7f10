"""Kafka API handlers for SASL and SCRAM credentials: DescribeUserScramCredentials,
AlterUserScramCredentials (forwarded to the controller, like other admin writes) and the
SaslHandshake / SaslAuthenticate answers for requests that reach the Kafka APIs (on a
non-SASL listener, or after authentication): ILLEGAL_SASL_STATE, as Kafka answers them."""

from __future__ import annotations

from broker.protocol.apis import ApiKey
from broker.security import scram
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation
from metadata.controller_api import ScramChange


class ScramApis:
    def __init__(self, apis):
        self.apis = apis  # broker.apis.kafka_apis.KafkaApis: image, controller, decode

    def handlers(self) -> dict:
        return {
            ApiKey.SASL_HANDSHAKE: self.sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self.sasl_authenticate,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
        }

    async def sasl_handshake(self, ctx, body, ver):
        self.apis.decode(ctx, body, ver)
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}

    async def sasl_authenticate(self, ctx, body, ver):
        self.apis.decode(ctx, body, ver)
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                "error_message": f"SaslAuthenticate on listener {ctx.listener}, which does not use SASL "
                                 "or is already authenticated", "auth_bytes": b""}

    async def describe_user_scram_credentials(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        if not self.apis.authorize_cluster(ctx, AclOperation.DESCRIBE):
            return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None, "results": []}
        creds = self.apis.image.scram_credentials
        by_user: dict[str, list[dict]] = {}
        for (user, mech), rec in sorted(creds.items()):
            by_user.setdefault(user, []).append({"mechanism": scram.MECHANISMS[mech][1], "iterations": rec.iterations})
        results = []
        if not req.users:  # null or empty: every user with a credential
            results = [{"user": u, "error_code": 0, "credential_infos": infos} for u, infos in by_user.items()]
        else:
            names = [u.name for u in req.users]
            for name in dict.fromkeys(names):
                if names.count(name) > 1:
                    results.append({"user": name, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                                    "error_message": "Cannot describe SCRAM credentials for the same user twice in "
                                                     "a single request", "credential_infos": []})
                elif name not in by_user:
                    results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                                    "error_message": "Attempt to describe a user credential that does not exist",
                                    "credential_infos": []})
                else:
                    results.append({"user": name, "error_code": 0, "credential_infos": by_user[name]})
        return {"throttle_time": 0, "error_code": 0, "results": results}

    async def alter_user_scram_credentials(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        if not self.apis.authorize_cluster(ctx, AclOperation.ALTER):  # else anyone could set anyone's password
            users = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
            return {"throttle_time": 0, "results": [{"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                     "error_message": None} for u in users]}
        changes: list[ScramChange] = []
        early: dict[str, tuple[int, str]] = {}
        for d in req.deletions:
            mech = scram.MECHANISM_BY_ID.get(int(d.mechanism))
            if mech is None:
                early.setdefault(d.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
                continue
            changes.append(ScramChange(d.name, mech, True))
        for u in req.upsertions:
            mech = scram.MECHANISM_BY_ID.get(int(u.mechanism))
            if mech is None:
                early.setdefault(u.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
                continue
            salted = bytes(u.salted_password)
            if salted and u.salt and scram.MIN_ITERATIONS <= u.iterations <= scram.MAX_ITERATIONS:
                cred = scram.credential_from_salted(mech, bytes(u.salt), salted, int(u.iterations))
                changes.append(ScramChange(u.name, mech, False, cred.salt, cred.stored_key, cred.server_key,
                                           cred.iterations))
            else:  # the controller gives the precise error
                changes.append(ScramChange(u.name, mech, False, bytes(u.salt), b"", b"", int(u.iterations)))
        changes = [c for c in changes if c.user not in early]
        results = {u: {"user": u, "error_code": code, "error_message": msg} for u, (code, msg) in early.items()}
        if changes:
            try:
                for user, code, msg in await self.apis.controller.alter_user_scram_credentials(changes):
                    results[user] = {"user": user, "error_code": code, "error_message": msg}
            except KafkaError as e:
                for c in changes:
                    results[c.user] = {"user": c.user, "error_code": e.code, "error_message": e.message}
        order = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
        return {"throttle_time": 0, "results": [results[u] for u in order if u in results]}
