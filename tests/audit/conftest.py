"""Fixtures of the audit tests; the synthetic audits themselves are in audit_fixtures.py."""
import pytest

from audit_fixtures import synthetic_audit


@pytest.fixture
def make_audit():
    return synthetic_audit


@pytest.fixture
def user_models():
    """Forget the models a test's plugin files registered."""
    from fusebench.audit import models

    yield
    models._reset_user_models()
