"""Final-answer extraction and equivalence (race.tasks.verify), in and out of threads."""

import threading

import pytest

from race.tasks.verify import answers_match, extract_final_answer, normalize_number


@pytest.mark.parametrize("text, number", [
    ("72", "72"), ("1,234", "1234"), ("+72.50", "72.5"), ("72.0", "72"), ("-0", "0"),
    ("-3", "-3"), (".5", "0.5"), ("$18", "18"), ("\\$18.", "18"), ("50%", "50"),
    ("1,234.56", "1234.56"), (" 7 ", "7"),
    ("1,23", None), ("abc", None), ("", None), ("3/4", None), ("12 apples", None),
])
def test_normalize_number(text, number):
    assert normalize_number(text) == number


@pytest.mark.parametrize("completion, answer", [
    ("48 / 2 = 24 clips in May.\n48 + 24 = 72\n#### 72", "72"),
    ("#### 1,234", "1234"),
    ("#### $1,234.50", "1234.5"),
    ("#### 72 dollars", "72"),
    ("#### 3/4", "3/4"),
    ("first #### 5 then\n#### 6", "6"),  # the last #### line wins
    ("The answer is $\\boxed{72}$.", "72"),
    ("So $\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
    ("\\boxed{1} and then \\boxed{2}", "2"),
    ("\\boxed{18\\text{ dollars}}", "18"),
    ("\\boxed{\\$18}", "18"),
    ("#### 7 but \\boxed{8}", "7"),  # #### is preferred over \boxed
    ("She has 3 apples, then 4 more: 7 in total.", "7"),
    ("Temperatures: 5 - 8 = -3", "-3"),
    ("5-3 = 2", "2"),  # a minus between terms is not a sign
    ("It costs 1,200.50 in all", "1200.5"),
    ("no number here", None),
    ("", None),
])
def test_extract_final_answer(completion, answer):
    assert extract_final_answer(completion) == answer


@pytest.mark.parametrize("completion, gold", [
    ("#### 72", "72"),
    ("\\boxed{72}", "72"),
    ("The answer is 72.0", "72"),
    ("#### 1,234", "1234"),
    ("#### 1234", "1,234"),
    ("so we get \\boxed{\\frac{1}{2}}", "0.5"),
    ("\\boxed{0.5}", "\\frac{1}{2}"),
    ("\\boxed{\\dfrac{3}{4}}", "0.75"),
    ("\\boxed{x + 1}", "1 + x"),
    ("#### -3", "-3"),
    ("#### 72", "Natalia sold 48 clips.\n#### 72"),  # gold may be a whole reference trace
])
def test_answers_match(completion, gold):
    assert answers_match(completion, gold)


@pytest.mark.parametrize("completion, gold", [
    ("#### 73", "72"),
    ("\\boxed{72.0000001}", "72"),  # exact decimals: no float rounding
    ("no answer at all", "72"),
    ("", "72"),
    ("#### 72", ""),
    ("\\boxed{x}", "y"),
    ("#### 3", "-3"),
    ("\\boxed{\\text{blue}}", "\\text{red}"),
])
def test_answers_do_not_match(completion, gold):
    assert not answers_match(completion, gold)


def test_works_in_worker_threads():
    # math_verify's default timeouts use signal.alarm, which raises outside the main thread
    cases = [("\\boxed{\\frac{1}{2}}", "0.5", True), ("#### 72", "72", True),
             ("\\boxed{x+1}", "1+x", True), ("\\boxed{3}", "4", False)]
    results, errors = {}, []

    def work(index):
        try:
            results[index] = [answers_match(c, g) for c, g, _ in cases]
        except Exception as error:  # noqa: BLE001 - reported to the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == {i: [expected for _, _, expected in cases] for i in range(3)}


def test_long_answers_skip_sympy():
    # past MAX_VERIFY_CHARS only the exact comparison (spaces ignored) is made
    expression = "+".join(["x"] * 200)
    assert answers_match("\\boxed{" + expression + "}", expression.replace("+", " + "))
    assert not answers_match("\\boxed{" + expression + "}", "200 x")
