"""The rest of test_recipe_training.py's recipe trainings (latent depth and LSL): a file of its own so
that pytest-xdist runs it on the other core (``--dist loadfile``); same checks, same fixtures."""

import pytest

from test_recipe_training import (PAPERS_HERE, check_recipe_trains_and_evaluates, corpus_for,  # noqa: F401 - fixtures
                                  covering_set, recipes_of, runs_dir)

PAPERS = tuple(sorted({paper for paper, _, _ in covering_set()} - set(PAPERS_HERE)))


def test_the_two_files_train_every_recipe_of_the_covering_set_once():
    assert set(PAPERS) | set(PAPERS_HERE) == {paper for paper, _, _ in covering_set()} and not set(PAPERS) & set(PAPERS_HERE)


@pytest.mark.slow
@recipes_of(PAPERS)
def test_recipe_trains_and_evaluates(corpus_for, runs_dir, paper, experiment, method, one_thread):
    check_recipe_trains_and_evaluates(corpus_for, runs_dir, paper, experiment, method)
