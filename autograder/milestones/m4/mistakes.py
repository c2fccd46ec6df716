"""Milestone 4's known mistakes: CATALOGUE (the mistakes the judge recomputes are declared beside their
computations in answers.py, with @CATALOGUE.entry) and the mistakes a check recognises from its own evidence,
declared here. A declaration without text: the check's message says it."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m4")

BATCH_MIXING = CATALOGUE.mistake("batch_mixing")
DROPOUT_IN_EVAL = CATALOGUE.mistake("dropout_in_eval")
GRAPH_CUT = CATALOGUE.mistake("graph_cut")
LAYER_COUNT = CATALOGUE.mistake("layer_count")
LAYERS_NOT_MODULELIST = CATALOGUE.mistake("layers_not_modulelist")
LOOKS_AHEAD = CATALOGUE.mistake("looks_ahead")
NORMS_REINITIALISED = CATALOGUE.mistake("norms_reinitialised")
NOT_XAVIER = CATALOGUE.mistake("not_xavier")
PADDING_NOT_IGNORED = CATALOGUE.mistake("padding_not_ignored")
PARAMETER_COUNT = CATALOGUE.mistake("parameter_count")
PARAMETER_NAMES = CATALOGUE.mistake("parameter_names")
PE_DROPOUT = CATALOGUE.mistake("pe_dropout")
PE_DTYPE = CATALOGUE.mistake("pe_dtype")
PE_LENGTH_ERROR = CATALOGUE.mistake("pe_length_error")
PE_LENGTH_OFF_BY_ONE = CATALOGUE.mistake("pe_length_off_by_one")
PE_NOT_BUFFER = CATALOGUE.mistake("pe_not_buffer")
PE_ODD_ACCEPTED = CATALOGUE.mistake("pe_odd_accepted")
SHARED_SUBMODULE = CATALOGUE.mistake("shared_submodule")
TIE_DIFFERENT_VOCABS = CATALOGUE.mistake("tie_different_vocabs")
TIED_BY_DEFAULT = CATALOGUE.mistake("tied_by_default")
TYING_BY_COPY = CATALOGUE.mistake("tying_by_copy")
