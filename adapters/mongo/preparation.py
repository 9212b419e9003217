"""Class ``preparation`` on MongoDB (spec: preparation.md): a capture's
reads pass one snapshot session (``start_session(snapshot=True)``: a replica
set or sharded cluster of MongoDB 5.0 or later; the faithful mongomock
emulates it by holding its lock).  A deployment without snapshot sessions
(a standalone server) does not declare the class."""

from __future__ import annotations

from cortex_spec.preparation import PreparationMethods

from .store import MongoStoreBase

__all__ = ["PreparationMixin"]


class PreparationMixin(PreparationMethods, MongoStoreBase):
    pass
