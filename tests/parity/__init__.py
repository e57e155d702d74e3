"""The differential suite: the same module, data and initial weights under pytorch-lightning 2.6.6 and interlock."""
