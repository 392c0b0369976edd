#!/bin/sh
echo "Goodbye, $1."
