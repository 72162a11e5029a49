"""KaninDataSource: format("kanin") for PySpark's Python data source API.

Spark builds an instance from the options in each process that needs one (planning,
the streaming source's process, commits); this class only parses the options and hands
out readers and writers, which do the work: reader.py for streams, queue_read.py for
classic and quorum queues (option mode=queue), writer.py for the sink.
"""

from __future__ import annotations

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.types import StructType

from kanin.spark.columns import column_layout
from kanin.spark.options import MODE, KaninOptions, Role, parse_options
from kanin.spark.queue_read import KaninQueueReader
from kanin.spark.reader import KaninBatchReader, KaninStreamReader
from kanin.spark.rows import READ_SCHEMA
from kanin.spark.writer import KaninBatchWriter, KaninStreamWriter


class KaninDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kanin"

    def schema(self) -> str:
        self._parsed(Role.READ)  # spark.read/readStream ... .load() fails here on bad options
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._parsed(Role.READ)
        if options.mode == "queue":
            raise ValueError(
                f"option {MODE}=queue reads only as a stream (spark.readStream): a batch read "
                "needs a stream to read offsets of"
            )
        return KaninBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._parsed(Role.READ)
        if options.mode == "queue":
            # PySpark then asks simpleStreamReader() instead.
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        return KaninStreamReader(options)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return KaninQueueReader(self._parsed(Role.READ))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = self._write_options(overwrite)
        return KaninBatchWriter(options, column_layout(schema, options.id_column))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = self._write_options(overwrite)
        return KaninStreamWriter(options, column_layout(schema, options.id_column))

    def _write_options(self, overwrite: bool) -> KaninOptions:
        if overwrite:
            raise ValueError(
                "format 'kanin' only appends messages: use mode('append') (or outputMode "
                "'append' when streaming)"
            )
        return self._parsed(Role.WRITE)

    def _parsed(self, role: Role) -> KaninOptions:
        return parse_options(dict(self.options), role)
