"""/v1/models: what this deployment serves."""
from __future__ import annotations

from fastapi import APIRouter

from blendserve.api.deps import AppState, OwnerDep, StateDep
from blendserve.api.errors import not_found
from blendserve.api.schemas import ERRORS, ModelList, ModelObject

router = APIRouter(prefix="/v1/models", tags=["models"])


def model_obj(name: str, st: AppState) -> dict:
    return {"id": name, "object": "model", "created": st.model_created.get(name, 0), "owned_by": "blendserve"}


@router.get("", response_model=ModelList, responses=ERRORS)
async def list_models(st: StateDep, _: OwnerDep) -> dict:
    return {"object": "list", "data": [model_obj(m, st) for m in st.model_names]}


@router.get("/{model_id:path}", response_model=ModelObject, responses=ERRORS)
async def retrieve_model(model_id: str, st: StateDep, _: OwnerDep) -> dict:
    if model_id not in st.model_names:
        raise not_found("model", model_id)
    return model_obj(model_id, st)
