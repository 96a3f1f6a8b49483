"""Keys without a database, to try tollgate's callback (LiteLLM's `custom_auth`): a key
`sk-<alias>[-team-<team>][-user-<user>][-prio-<class>]` is a virtual key with that alias, team,
user and priority (its metadata `priority`, the class tollgate's guaranteed shares go by).
Anyone can write any such key: never use this in front of real users."""

from fastapi import Request
from litellm.proxy._types import UserAPIKeyAuth


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    parts = api_key.removeprefix("Bearer ").removeprefix("sk-").split("-")
    fields = dict(zip(parts[1::2], parts[2::2]))
    meta = {"priority": fields["prio"]} if "prio" in fields else {}
    return UserAPIKeyAuth(
        api_key=api_key,
        key_alias=parts[0],
        team_id=fields.get("team"),
        user_id=fields.get("user"),
        metadata=meta,
    )
