package main

func init() { register(opsCommand("pause")) }
